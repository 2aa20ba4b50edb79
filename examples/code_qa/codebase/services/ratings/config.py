"""Runtime settings of the ratings service."""

SERVICE_NAME = "ratings"
DEFAULT_PORT = 7858
REQUEST_TIMEOUT_MS = 2450
MAX_RETRIES = 87
EVENT_QUEUE = "ratings.backfill.v4"
LOG_LEVEL = "WARNING"
