"""`arft sft` through the real CLI: what it refuses, and why (before any model is loaded)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.test_sft import write_job
from tests.unit.cli.runner import flat, invoke


def test_sft_refuses_missing_demonstrations_and_bad_options(tmp_path: Path) -> None:
    job = write_job(tmp_path)
    out = invoke("sft", str(job), "--data", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "run"))
    assert out.exit_code == 2 and "no such file or run directory" in flat(out.output + out.stderr)
    out = invoke("sft", str(job), "--data", str(tmp_path / "demos.jsonl"), "--resume")
    assert out.exit_code == 2 and "--resume continues a run directory" in flat(out.output + out.stderr)
    out = invoke("sft", str(job), "--data", str(tmp_path / "demos.jsonl"), "--min-score", "verified")
    assert out.exit_code == 2 and "write NAME=VALUE" in flat(out.output + out.stderr)
    (tmp_path / "bad.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\nnot json\n')
    out = invoke("sft", str(job), "--data", str(tmp_path / "bad.jsonl"), "--out", str(tmp_path / "r2"))
    assert out.exit_code == 2 and "bad.jsonl:2" in flat(out.output + out.stderr)


def test_sft_with_no_usable_demonstration_lists_the_reasons(tmp_path: Path) -> None:
    job = write_job(tmp_path)
    (tmp_path / "answers.jsonl").write_text('{"id": "t1", "messages": [{"role": "user", "content": "hi"}]}\n')
    out = invoke("sft", str(job), "--data", str(tmp_path / "answers.jsonl"), "--out", str(tmp_path / "run"),
                 "--no-eval")
    text = flat(out.output + out.stderr)
    assert out.exit_code == 2 and "no demonstration is left" in text and "no assistant turn" in text
