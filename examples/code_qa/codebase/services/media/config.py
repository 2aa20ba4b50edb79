"""Runtime settings of the media service."""

SERVICE_NAME = "media"
DEFAULT_PORT = 8249
REQUEST_TIMEOUT_MS = 2660
MAX_RETRIES = 46
EVENT_QUEUE = "media.sync.v8"
LOG_LEVEL = "WARNING"
