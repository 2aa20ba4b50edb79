"""Runtime settings of the orders service."""

SERVICE_NAME = "orders"
DEFAULT_PORT = 7896
REQUEST_TIMEOUT_MS = 6830
MAX_RETRIES = 55
EVENT_QUEUE = "orders.sync.v7"
LOG_LEVEL = "WARNING"
