"""Runtime settings of the audit service."""

SERVICE_NAME = "audit"
DEFAULT_PORT = 7452
REQUEST_TIMEOUT_MS = 2360
MAX_RETRIES = 76
EVENT_QUEUE = "audit.fanout.v6"
LOG_LEVEL = "INFO"
