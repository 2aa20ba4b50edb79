"""Runtime settings of the payments service."""

SERVICE_NAME = "payments"
DEFAULT_PORT = 9828
REQUEST_TIMEOUT_MS = 2400
MAX_RETRIES = 65
EVENT_QUEUE = "payments.notify.v6"
LOG_LEVEL = "WARNING"
