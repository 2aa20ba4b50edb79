"""`arft grade`: grade one sample with a grader spec (the hosted graders/run).

Thin command: read the JSON arguments (``arft.cli.inputs``), call
``arft.graders.validate.run_grader``, print the score (rich) and the result as one JSON object.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.text import Text

from arft.cli.console import console, fail
from arft.cli.regrade_view import regrade_cmd
from arft.cli.inputs import read_object_arg
from arft.graders.base import GraderError
from arft.graders.validate import InputError, complete_sample, run_grader, sample_from_text, score_json


def _score_text(result: dict[str, Any]) -> Text:
    t = Text()
    style = "green" if result["passed"] else ("red" if result["error"] else "yellow")
    t.append("score   ", style="bold").append(f"{result['score']:.4g}", style=style)
    if result["passed"] is not None:
        t.append(f"  ({'passed' if result['passed'] else 'not passed'})")
    for name, value in result["sub_scores"].items():
        t.append(f"\n  {name}  ", style="bold").append(f"{value:.4g}")
    if result["flags"]:
        t.append("\nflags   ", style="bold").append(", ".join(result["flags"]), style="yellow")
    if result["error"]:
        t.append("\nerror   ", style="bold").append(result["error"], style="red")
    return t


def grade_cmd(
    grader: str = typer.Option(..., "--grader", "-g", help="Grader spec: a JSON file or inline JSON."),
    item: Optional[str] = typer.Option(
        None, "--item", "-i", help="The task item (JSON file or inline; default {})."),
    sample: Optional[str] = typer.Option(
        None, "--sample", "-s", help="A sample (JSON file or inline); missing keys get defaults."),
    model_sample: Optional[str] = typer.Option(
        None, "--model-sample", "-m", help="The model's answer text (instead of --sample)."),
    as_json: bool = typer.Option(False, "--json", help="Print only the JSON result."),
    replay: Optional[Path] = typer.Option(
        None, "--replay", metavar="RUN_DIR", help="Re-grade a stored run's trajectories with --grader "
                                                  "(nothing else runs) and compare old vs new reward per task."),
    run_id: Optional[str] = typer.Option(None, "--run", help="With --replay: this run of the folder "
                                                              "(default: every eval run)."),
) -> None:
    """Grade one sample (the hosted graders/run) and print the result as one JSON object.

    The object is {"score", "sub_scores", "passed", "error", "flags"}; exit 0 whatever the score.
    With --replay RUN_DIR: re-grade that run's stored rollouts and print old vs new per task.
    """
    if replay is not None:
        if sample is not None or model_sample is not None or item is not None:
            fail("--replay grades the run's own samples and items: drop --sample, --model-sample and --item")
        return regrade_cmd(replay, grader, run_id, as_json)
    if (sample is None) == (model_sample is None):
        fail("pass exactly one of --sample (a sample JSON) or --model-sample (the answer text)")
    spec, base_dir = read_object_arg(grader, "--grader")
    item_data = read_object_arg(item, "--item")[0] if item is not None else {}
    try:
        full = (sample_from_text(model_sample) if model_sample is not None
                else complete_sample(read_object_arg(sample, "--sample")[0]))  # type: ignore[arg-type]
        score = asyncio.run(run_grader(spec, base_dir, item_data, full))
    except (GraderError, InputError) as e:  # the spec, --item or --sample: say how to check them
        fail(str(e), hint="check the spec with: arft grader validate GRADER [--item ITEM --sample SAMPLE]")
    result = score_json(score)
    if not as_json:
        console.print(_score_text(result))
    typer.echo(json.dumps(result))
