"""Runtime settings of the mailer service."""

SERVICE_NAME = "mailer"
DEFAULT_PORT = 8183
REQUEST_TIMEOUT_MS = 2430
MAX_RETRIES = 86
EVENT_QUEUE = "mailer.events.v2"
LOG_LEVEL = "INFO"
