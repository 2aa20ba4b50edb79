"""The check every example's plain-rows variant passes (``make_data.py --plain`` + ``job_plain.yaml``).

A plain row is what real traffic looks like: the system prompt and the user's request, with the
full row's id, item keys and per-row tools, and none of its worked-example turns.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from arft.config import load_job
from arft.tools.python_fn import PythonTool


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_plain_variant(example: Path, generated: Path) -> None:
    """``generated`` holds what ``make_data.py --plain`` writes now: the committed plain files are
    current, each plain row is its full row without the worked examples, and ``job_plain.yaml``
    is ``job.yaml`` on the plain files with ``tool_choice: required`` (and tighter tool schemas)."""
    for split in ("train", "validation"):
        plain_file = example / f"{split}_plain.jsonl"
        assert (generated / plain_file.name).read_bytes() == plain_file.read_bytes(), (
            f"stale {plain_file.name}: run python make_data.py --plain in {example}")
        full, plain = rows(example / f"{split}.jsonl"), rows(plain_file)
        assert [r["id"] for r in plain] == [r["id"] for r in full]
        for f, p in zip(full, plain):
            assert {k: v for k, v in p.items() if k != "messages"} == {k: v for k, v in f.items() if k != "messages"}
            assert not [m for m in p["messages"] if m["role"] in ("assistant", "tool")], p["id"]
            assert p["messages"][-1] == f["messages"][-1] and p["messages"][-1]["role"] == "user"
            assert p["messages"] == [m for m in f["messages"] if m["role"] == "system"] + [f["messages"][-1]]
        assert any(m["role"] == "assistant" for m in full[0]["messages"])  # the full rows do show examples

    job, plain_job = load_job(example / "job.yaml"), load_job(example / "job_plain.yaml")
    assert plain_job.path(plain_job.training_file) == example / "train_plain.jsonl"
    assert plain_job.path(plain_job.validation_file) == example / "validation_plain.jsonl"
    assert plain_job.suffix == f"{job.suffix}_plain" and plain_job.rollout.tool_choice == "required"
    # A python tool's own schema comes from its signature; a plain job may restate it with bounds.
    tools = []
    for full_tool, plain_tool in zip(job.rl.tools, plain_job.rl.tools, strict=True):
        if getattr(plain_tool, "parameters", None) is not None and plain_tool.type == "python":
            derived = PythonTool(full_tool, job.base_dir).schema["function"]["parameters"]
            assert without_max_length(plain_tool.parameters) == derived, plain_tool.function
            plain_tool = plain_tool.model_copy(update={"parameters": full_tool.parameters})
        tools.append(plain_tool)
    rl = plain_job.rl.model_copy(update={"tools": tools})
    same = plain_job.model_copy(update={
        "method": plain_job.method.model_copy(update={"reinforcement": rl}),
        "training_file": job.training_file, "validation_file": job.validation_file, "suffix": job.suffix,
        # worked_example may differ: a plain job may show the tool block's own (neutral) example;
        # and it may turn parallel calls off (one lookup a turn: no second call cut mid-string).
        "rollout": plain_job.rollout.model_copy(update={"tool_choice": job.rollout.tool_choice,
                                                        "worked_example": job.rollout.worked_example,
                                                        "parallel_tool_calls": job.rollout.parallel_tool_calls})})
    # every other setting is job.yaml's; a plain job's tool schemas may be tighter (maxLength on
    # strings, so that a constrained call closes its string within max_new_tokens)
    assert without_max_length(same.model_dump()) == job.model_dump()


def without_max_length(value: Any) -> Any:
    """``value`` with every ``maxLength`` key removed, at any depth."""
    if isinstance(value, dict):
        return {k: without_max_length(v) for k, v in value.items() if k != "maxLength"}
    if isinstance(value, list):
        return [without_max_length(v) for v in value]
    return value
