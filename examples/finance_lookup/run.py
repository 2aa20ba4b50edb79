"""One command for the finance_lookup example: start the tool server, run arft, stop the server.

    python examples/finance_lookup/run.py                      # arft train examples/finance_lookup/job.yaml
    python examples/finance_lookup/run.py train --out runs/fl  # any arft arguments after the command
    python examples/finance_lookup/run.py eval --limit 8 --samples 4

The first argument is the arft command (default ``train``); the job file is added after it, and
every other argument is passed on unchanged. The exit code is arft's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from services import serve  # noqa: E402 - the example's own module, next to this file


def arft_command(argv: list[str]) -> list[str]:
    """``arft <command> <job.yaml> <the rest>``, with the arft next to this interpreter if any."""
    command, rest = (argv[0], argv[1:]) if argv and not argv[0].startswith("-") else ("train", argv)
    local = Path(sys.executable).with_name("arft")
    arft = str(local) if local.exists() else shutil.which("arft") or "arft"
    return [arft, command, str(HERE / "job.yaml"), *rest]


def main() -> int:
    with serve() as url:
        print(f"finance_lookup tools serving on {url}", flush=True)
        return subprocess.call(arft_command(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
