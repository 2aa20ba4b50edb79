"""Runtime settings of the reports service."""

SERVICE_NAME = "reports"
DEFAULT_PORT = 8527
REQUEST_TIMEOUT_MS = 2010
MAX_RETRIES = 31
EVENT_QUEUE = "reports.dlq.v6"
LOG_LEVEL = "INFO"
