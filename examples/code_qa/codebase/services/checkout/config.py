"""Runtime settings of the checkout service."""

SERVICE_NAME = "checkout"
DEFAULT_PORT = 7003
REQUEST_TIMEOUT_MS = 1200
MAX_RETRIES = 37
EVENT_QUEUE = "checkout.events.v3"
LOG_LEVEL = "WARNING"
