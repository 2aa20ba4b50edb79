"""Runtime settings of the shipping service."""

SERVICE_NAME = "shipping"
DEFAULT_PORT = 8453
REQUEST_TIMEOUT_MS = 5000
MAX_RETRIES = 57
EVENT_QUEUE = "shipping.notify.v6"
LOG_LEVEL = "WARNING"
