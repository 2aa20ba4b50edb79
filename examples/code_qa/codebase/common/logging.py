"""Log formatting shared by every service."""

LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
