"""Runtime settings of the search service."""

SERVICE_NAME = "search"
DEFAULT_PORT = 8209
REQUEST_TIMEOUT_MS = 6070
MAX_RETRIES = 77
EVENT_QUEUE = "search.backfill.v2"
LOG_LEVEL = "WARNING"
