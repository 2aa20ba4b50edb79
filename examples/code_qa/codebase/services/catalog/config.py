"""Runtime settings of the catalog service."""

SERVICE_NAME = "catalog"
DEFAULT_PORT = 7404
REQUEST_TIMEOUT_MS = 4020
MAX_RETRIES = 62
EVENT_QUEUE = "catalog.dlq.v4"
LOG_LEVEL = "WARNING"
