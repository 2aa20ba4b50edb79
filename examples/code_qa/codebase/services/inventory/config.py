"""Runtime settings of the inventory service."""

SERVICE_NAME = "inventory"
DEFAULT_PORT = 7980
REQUEST_TIMEOUT_MS = 5010
MAX_RETRIES = 38
EVENT_QUEUE = "inventory.audit-trail.v7"
LOG_LEVEL = "INFO"
