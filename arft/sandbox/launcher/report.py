"""The report pipe: JSON lines telling the host which isolation layers were applied, why the
command could not be started, and how it ended (read by ``arft.sandbox.command.read_report``)."""

from __future__ import annotations

import json
import os
from typing import Any, Callable


class Report:
    """JSON lines on the report pipe: what was applied, errors, and the exit status."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.layers: list[str] = ["session"]

    def add(self, layer: str) -> None:
        if layer not in self.layers:
            self.layers.append(layer)

    def send(self, **fields: object) -> None:
        try:
            os.write(self.fd, (json.dumps(fields) + "\n").encode())
        except OSError:
            pass  # the parent is gone; nothing to tell

    def fail(self, message: str, code: int = 126) -> None:
        """Abort before exec: the command never runs."""
        self.send(error=message, isolation=self.layers)
        os.write(2, f"arft sandbox: {message}\n".encode(errors="replace"))
        os._exit(code)


def try_layer(report: Report, layer: str, fn: Callable[..., object], *args: Any) -> bool:
    """Apply one optional layer: on success record it, on ``OSError`` skip it (never fatal)."""
    try:
        fn(*args)
    except OSError:
        return False
    report.add(layer)
    return True
