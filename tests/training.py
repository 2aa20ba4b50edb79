"""What the training tests share: a continuous reward that needs no model, and a small dataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from arft.records import Score


class LengthGrader:
    """A continuous reward from the answer's length: random text gives every group variance."""

    name = "length"

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        return Score(score=(len(sample["output_text"]) % 13) / 12.0)


def write_datasets(tmp: Path, n_train: int, n_val: int) -> None:
    """``train.jsonl`` with ``n_train`` one-message tasks and ``val.jsonl`` with the first
    ``n_val`` of them, in ``tmp``."""
    rows = [{"id": f"t{i}", "messages": [{"role": "user", "content": f"Say something about {i}."}]}
            for i in range(n_train)]
    (tmp / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:n_val]))
