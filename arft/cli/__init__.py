"""The `arft` command line: one module per command (``<name>_cmd.py``), all registered in
``main.py``, all printing through ``console.py``."""
