"""Runtime settings of the pricing service."""

SERVICE_NAME = "pricing"
DEFAULT_PORT = 7918
REQUEST_TIMEOUT_MS = 3240
MAX_RETRIES = 94
EVENT_QUEUE = "pricing.dlq.v5"
LOG_LEVEL = "DEBUG"
