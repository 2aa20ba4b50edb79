"""`arft merge RUN_DIR OUT_DIR`: the run's latest checkpoint as a plain Hugging Face model.

Thin command over ``arft.trainer.merge.merge_run`` (which imports torch/peft only when it runs).
"""

from __future__ import annotations

from pathlib import Path

import typer

from arft.cli.console import console
from arft.trainer.merge import merge_run


def merge_cmd(run_dir: Path = typer.Argument(..., help="A training run directory."),
              out_dir: Path = typer.Argument(..., help="Where to write the merged model.")) -> None:
    """Write the run's latest checkpoint as a plain Hugging Face model (safetensors + tokenizer)."""
    path = merge_run(run_dir, out_dir)
    console.print(f"merged model written to [bold]{path}[/] — load it with "
                  f"AutoModelForCausalLM.from_pretrained('{path}')")
