"""``python -m arft.cpu build [--strict]``: build arft's CPU kernels ahead of time and say, one line
a library, whether its ops run here ("loaded") or not ("off because ..."). ``make setup`` runs it,
so no training run pays the build. Informational: it exits 0 when kernels are off on this CPU;
with ``--strict`` it exits 1 where a library failed to build or open (a CPU without the
instructions a library needs is no failure).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Build, load and report every library; the exit status (module doc)."""
    parser = argparse.ArgumentParser(prog="python -m arft.cpu", description="Build arft's CPU kernels ahead of time.")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build every kernel library into the cache and report each one")
    build.add_argument("--strict", action="store_true", help="exit 1 where a library failed to build or open")
    args = parser.parse_args(argv)

    from arft.cpu import build as builds
    from arft.cpu import kernels

    print(f"arft CPU kernels, cached in {builds.cache_dir()}:")
    libraries = kernels.status()
    for library in libraries:
        print(f"  {library.line()}")
    return 1 if args.strict and any(s.broken for s in libraries) else 0


if __name__ == "__main__":
    sys.exit(main())
