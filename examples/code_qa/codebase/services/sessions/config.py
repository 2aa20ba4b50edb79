"""Runtime settings of the sessions service."""

SERVICE_NAME = "sessions"
DEFAULT_PORT = 7053
REQUEST_TIMEOUT_MS = 3210
MAX_RETRIES = 44
EVENT_QUEUE = "sessions.events.v6"
LOG_LEVEL = "WARNING"
