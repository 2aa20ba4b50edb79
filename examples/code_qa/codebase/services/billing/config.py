"""Runtime settings of the billing service."""

SERVICE_NAME = "billing"
DEFAULT_PORT = 9174
REQUEST_TIMEOUT_MS = 5330
MAX_RETRIES = 34
EVENT_QUEUE = "billing.notify.v6"
LOG_LEVEL = "DEBUG"
