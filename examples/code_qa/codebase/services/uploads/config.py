"""Runtime settings of the uploads service."""

SERVICE_NAME = "uploads"
DEFAULT_PORT = 7495
REQUEST_TIMEOUT_MS = 1400
MAX_RETRIES = 42
EVENT_QUEUE = "uploads.dlq.v8"
LOG_LEVEL = "INFO"
