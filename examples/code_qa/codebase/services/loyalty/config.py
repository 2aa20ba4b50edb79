"""Runtime settings of the loyalty service."""

SERVICE_NAME = "loyalty"
DEFAULT_PORT = 7564
REQUEST_TIMEOUT_MS = 1450
MAX_RETRIES = 61
EVENT_QUEUE = "loyalty.backfill.v4"
LOG_LEVEL = "DEBUG"
