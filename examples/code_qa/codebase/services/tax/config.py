"""Runtime settings of the tax service."""

SERVICE_NAME = "tax"
DEFAULT_PORT = 8995
REQUEST_TIMEOUT_MS = 1980
MAX_RETRIES = 48
EVENT_QUEUE = "tax.fanout.v5"
LOG_LEVEL = "WARNING"
