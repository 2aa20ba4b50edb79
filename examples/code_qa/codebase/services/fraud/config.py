"""Runtime settings of the fraud service."""

SERVICE_NAME = "fraud"
DEFAULT_PORT = 7960
REQUEST_TIMEOUT_MS = 4750
MAX_RETRIES = 41
EVENT_QUEUE = "fraud.audit-trail.v9"
LOG_LEVEL = "DEBUG"
