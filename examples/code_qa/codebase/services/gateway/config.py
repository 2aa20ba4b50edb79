"""Runtime settings of the gateway service."""

SERVICE_NAME = "gateway"
DEFAULT_PORT = 8112
REQUEST_TIMEOUT_MS = 2210
MAX_RETRIES = 93
EVENT_QUEUE = "gateway.backfill.v6"
LOG_LEVEL = "DEBUG"
