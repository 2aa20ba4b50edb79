"""What the training tests share: continuous rewards that need no model, and a small dataset."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from arft.records import Score


class LengthGrader:
    """A continuous reward from the answer's length: random text gives every group variance."""

    name = "length"

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        return Score(score=(len(sample["output_text"]) % 13) / 12.0)


class TraceGrader:
    """A reward drawn from the rollout's trace id, whatever it says: a group's rewards differ even
    when the policy has collapsed to one output (a large learning rate on a tiny model may do that
    in one step; ``LengthGrader`` then gives a group equal rewards and the step trains nothing).
    For tests of scheduling that need every step to train, not of learning."""

    name = "trace"

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        digest = hashlib.sha256(sample["trajectory"]["trace_id"].encode()).digest()
        return Score(score=int.from_bytes(digest[:4], "big") / 2**32)


def write_datasets(tmp: Path, n_train: int, n_val: int) -> None:
    """``train.jsonl`` with ``n_train`` one-message tasks and ``val.jsonl`` with the first
    ``n_val`` of them, in ``tmp``."""
    rows = [{"id": f"t{i}", "messages": [{"role": "user", "content": f"Say something about {i}."}]}
            for i in range(n_train)]
    (tmp / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:n_val]))
