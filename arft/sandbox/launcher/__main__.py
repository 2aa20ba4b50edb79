"""Entry point of the sandbox launcher: ``python -I -S .../arft/sandbox/launcher CONFIG -- ARGV``.

Run as a folder, this file is a top-level module and the folder itself is ``sys.path[0]``. We put
the folder's parent at the end of ``sys.path`` instead (so the standard library always wins) and
import the launcher as the package ``launcher``: its relative imports then work without
importing arft (whose ``__init__`` modules pull in asyncio and more).
"""

import os
import sys

if __package__:  # python -m arft.sandbox.launcher
    from .process_tree import main
else:
    del sys.path[0]
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # the folder's parent is on sys.path only at run time, so mypy sees no package `launcher`
    from launcher.process_tree import main  # type: ignore[import-not-found,no-redef]

if __name__ == "__main__":
    main()
