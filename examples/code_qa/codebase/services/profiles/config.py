"""Runtime settings of the profiles service."""

SERVICE_NAME = "profiles"
DEFAULT_PORT = 7815
REQUEST_TIMEOUT_MS = 4970
MAX_RETRIES = 67
EVENT_QUEUE = "profiles.events.v7"
LOG_LEVEL = "WARNING"
