"""Runtime settings of the coupons service."""

SERVICE_NAME = "coupons"
DEFAULT_PORT = 7010
REQUEST_TIMEOUT_MS = 4040
MAX_RETRIES = 88
EVENT_QUEUE = "coupons.audit-trail.v7"
LOG_LEVEL = "DEBUG"
