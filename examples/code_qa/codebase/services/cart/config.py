"""Runtime settings of the cart service."""

SERVICE_NAME = "cart"
DEFAULT_PORT = 7369
REQUEST_TIMEOUT_MS = 4060
MAX_RETRIES = 90
EVENT_QUEUE = "cart.events.v8"
LOG_LEVEL = "INFO"
