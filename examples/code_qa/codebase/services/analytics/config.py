"""Runtime settings of the analytics service."""

SERVICE_NAME = "analytics"
DEFAULT_PORT = 7199
REQUEST_TIMEOUT_MS = 2520
MAX_RETRIES = 63
EVENT_QUEUE = "analytics.audit-trail.v2"
LOG_LEVEL = "DEBUG"
