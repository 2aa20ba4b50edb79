"""Real ASGI apps on 127.0.0.1 for tests and benchmarks: the library's own mechanism."""

from arft.serving import free_port, serve

__all__ = ["free_port", "serve"]
