"""HTTP client defaults shared by every service (each overrides them)."""

DEFAULT_TIMEOUT_MS = 30000
DEFAULT_MAX_RETRIES = 3
USER_AGENT = "shop-platform"
