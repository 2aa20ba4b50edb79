"""One command for any example: start its services, run arft on its job, stop the services.

    python examples/run.py NAME                         # arft train examples/NAME/job.yaml
    python examples/run.py NAME train --out runs/x      # any arft arguments after the command
    python examples/run.py NAME eval --limit 8 --samples 4
    python examples/run.py NAME eval --job job_plain.yaml   # another job file of the example

An example whose tools (or judge) are services has ``examples/NAME/services.py`` with a context
manager ``serve()`` that starts them on 127.0.0.1 for the duration of a ``with`` block
(finance_lookup's HTTP tool server, fast_function's hack judge); the others run arft directly.
The first argument after NAME is the arft command (default ``train``); the job file
(``examples/NAME/job.yaml``, or ``--job FILE`` relative to the example) is added after it and every
other argument is passed on unchanged. The exit code is arft's.
``bench/case_study.py`` uses the same hooks.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, ContextManager

EXAMPLES = Path(__file__).resolve().parent


def example_dir(name: str) -> Path:
    """``examples/NAME``, or a clear error listing the examples there are."""
    path = EXAMPLES / name
    if not (path / "job.yaml").is_file():
        known = sorted(p.name for p in EXAMPLES.iterdir() if (p / "job.yaml").is_file())
        raise SystemExit(f"no example {name!r} (no {path / 'job.yaml'}); the examples are: {', '.join(known)}")
    return path


def example_hook(env_dir: Path, module_name: str, attr: str) -> Any:
    """``attr`` of ``examples/ENV/<module_name>.py`` when the example has that file, else None."""
    path = env_dir / f"{module_name}.py"
    if not path.exists():
        return None
    from arft.pyfile import load_file  # the examples are folders, not a package

    return getattr(load_file(path, f"{module_name}_{env_dir.name}"), attr)


def services(env_dir: Path) -> ContextManager[Any]:
    """The example's ``services.serve()`` when it has one, else a block that starts nothing."""
    serve = example_hook(env_dir, "services", "serve")
    return serve() if serve is not None else contextlib.nullcontext()


def arft_command(env_dir: Path, argv: list[str]) -> list[str]:
    """``arft <command> <job file> <the rest>``, with the arft next to this interpreter if any."""
    job = "job.yaml"
    if "--job" in argv:
        at = argv.index("--job")
        if at + 1 == len(argv):
            raise SystemExit("--job needs a file name (relative to the example), e.g. --job job_plain.yaml")
        job, argv = argv[at + 1], argv[:at] + argv[at + 2:]
    command, rest = (argv[0], argv[1:]) if argv and not argv[0].startswith("-") else ("train", argv)
    local = Path(sys.executable).with_name("arft")
    arft = str(local) if local.exists() else shutil.which("arft") or "arft"
    return [arft, command, str(env_dir / job), *rest]


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    env_dir = example_dir(argv[0])
    with services(env_dir) as started:
        if started:
            print(f"{env_dir.name}: services on {started}", file=sys.stderr, flush=True)
        return subprocess.call(arft_command(env_dir, argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
