"""Runtime settings of the ledger service."""

SERVICE_NAME = "ledger"
DEFAULT_PORT = 7560
REQUEST_TIMEOUT_MS = 2560
MAX_RETRIES = 54
EVENT_QUEUE = "ledger.dlq.v7"
LOG_LEVEL = "DEBUG"
