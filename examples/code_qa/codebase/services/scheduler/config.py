"""Runtime settings of the scheduler service."""

SERVICE_NAME = "scheduler"
DEFAULT_PORT = 7178
REQUEST_TIMEOUT_MS = 1250
MAX_RETRIES = 92
EVENT_QUEUE = "scheduler.events.v8"
LOG_LEVEL = "INFO"
