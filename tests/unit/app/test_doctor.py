"""`arft doctor` verdicts on a good synthetic job and on deliberately broken ones (static checks,
the real grader audit, exploration verdicts from stored-shape rollouts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from arft.config import JobError, load_job
from arft.records import Message, Rollout, Score, ToolCallRecord, new_trace_id
from arft.app.doctor import Check, DoctorReport, load_data, run_doctor
from arft.app.doctor.reward_checks import check_pass_at_k, check_variance
from arft.cli.doctor_cmd import render_doctor

FUZZY = {"type": "text_similarity", "name": "close", "input": "{{ sample.output_text }}",
         "reference": "{{ item.answer }}", "evaluation_metric": "fuzzy_match"}
LIKE = {"type": "string_check", "name": "has", "input": "{{ sample.output_text }}",
        "reference": "{{ item.answer }}", "operation": "like"}
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike", "november", "oscar", "papa"]


def row(tid: str, prompt: str, answer: str | None = "42", **extra: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"id": tid, "messages": [{"role": "user", "content": prompt}], **extra}
    if answer is not None:
        r["answer"] = answer
    return r


def good_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Distinct prompts of one shape: 12 training rows, 10 validation rows."""
    train = [row(f"t{i}", f"Which code word follows {WORDS[i]} in the list {i}?", WORDS[i + 1])
             for i in range(12)]
    val = [row(f"v{i}", f"Which code word precedes {WORDS[i + 5]} in the table {i}?",
               WORDS[i + 4]) for i in range(10)]
    return train, val


def write_job(tmp: Path, train: list[dict[str, Any]], val: list[dict[str, Any]] | None = None,
              grader: dict[str, Any] | None = None, **extra: Any) -> Path:
    def dump(name: str, rows: list[dict[str, Any]]) -> None:
        (tmp / name).write_text("".join(json.dumps(r) + "\n" for r in rows))

    dump("train.jsonl", train)
    job: dict[str, Any] = {
        "model": "smollm2-135m-instruct", "training_file": "train.jsonl",
        "method": {"type": "reinforcement", "reinforcement": {
            "grader": grader or FUZZY, "tools": [{"type": "shell"}], "max_episode_steps": 2}},
        "sampling": {"max_new_tokens": 16}, "rollout": {"max_turns": 2, "max_tokens": 1024},
        **extra}
    if val is not None:
        dump("val.jsonl", val)
        job["validation_file"] = "val.jsonl"
    (tmp / "job.json").write_text(json.dumps(job))
    return tmp / "job.json"


async def static(path: Path, traffic: Path | None = None) -> dict[str, Any]:
    job = load_job(path)
    report = await run_doctor(job, load_data(job, traffic), rollouts=False)
    return {c.id: c for c in report.checks} | {"_report": report}


async def test_a_good_job_passes_every_static_check(tmp_path: Path) -> None:
    checks = await static(write_job(tmp_path, *good_rows()))
    report: DoctorReport = checks.pop("_report")
    assert {k: c.verdict for k, c in checks.items()} == {
        "task.fields": "pass", "task.tools": "pass", "task.grader": "pass", "data.sizes": "pass",
        "data.overlap": "pass", "data.drift": "pass", "explore.variance": "skip",
        "explore.pass_at_k": "skip", "reward.hacks": "pass", "reward.continuous": "skip"}
    assert report.exit_code == 0 and not report.failed
    assert "22 rows" in checks["task.fields"].measured
    assert "shell" in checks["task.tools"].measured
    assert all(c.threshold for c in checks.values() if c.verdict != "skip")


async def test_a_row_missing_the_graders_field_fails(tmp_path: Path) -> None:
    train, val = good_rows()
    train[3] = row("t3", "What is the word?", answer=None)
    checks = await static(write_job(tmp_path, train, val))
    c = checks["task.fields"]
    assert c.verdict == "fail" and checks["_report"].exit_code == 1
    assert c.measured.startswith("1/22 rows")
    assert c.details == ["{{ item.answer }} (reference) missing in 1 row(s): train:t3"]
    assert "add the field" in c.advice


async def test_fields_a_python_grader_reads_by_subscript(tmp_path: Path) -> None:
    source = ("def grade(sample, it):\n"
              "    ref = it['answer']\n"
              "    bonus = it.get('bonus', 0)\n"  # has a default: not required
              "    return float(ref in sample['output_text']) + bonus\n")
    train, val = good_rows()
    del val[4]["answer"]
    checks = await static(write_job(tmp_path, train, val,
                                    grader={"type": "python", "name": "py", "source": source}))
    c = checks["task.fields"]
    assert c.verdict == "fail"
    assert c.details == ['{{ item["answer"] }} (grader source) missing in 1 row(s): validation:v4']


def test_item_reads_of_nested_graders(tmp_path: Path) -> None:
    from arft.graders.validate import item_reads

    (tmp_path / "g.py").write_text("def grade(s, row):\n    return row['facts'][0] in s['output_text']\n")
    spec = {"type": "multi", "calculate_output": "a + b + c", "graders": {
        "a": LIKE, "b": {**FUZZY, "reference": "{{item.facts[0]}} {{ bogus }}"},
        "c": {"type": "python", "name": "c", "file": "g.py"}}}
    assert item_reads(spec, tmp_path) == [("graders.a.reference", "item.answer"),
                                          ("graders.b.reference", "item.facts[0]"),
                                          ("graders.c source", 'item["facts"]')]


async def test_a_row_naming_a_missing_tool_fails(tmp_path: Path) -> None:
    train, val = good_rows()
    val[2]["tools"] = [{"type": "function", "function": {"name": "web_search"}}]
    checks = await static(write_job(tmp_path, train, val))
    c = checks["task.tools"]
    assert c.verdict == "fail"
    assert any("'v2'" in d and "'web_search'" in d and "available: shell" in d for d in c.details)


async def test_an_invalid_grader_fails_and_skips_the_audit(tmp_path: Path) -> None:
    # A schema error (operation: contains) already stops load_job, naming file and line; the
    # doctor's check finds what the schema cannot: templates that do not resolve.
    bad = {"type": "string_check", "name": "x", "input": "{{ sample.output_txt }}",
           "reference": "{{ sample.output_jsn }}", "operation": "eq"}
    with pytest.raises(JobError, match="operation"):
        load_job(write_job(tmp_path, *good_rows(), grader={**bad, "operation": "contains"}))
    checks = await static(write_job(tmp_path, *good_rows(), grader=bad))
    c = checks["task.grader"]
    assert c.verdict == "fail" and len(c.details) >= 2
    assert any("output_txt" in d for d in c.details) and any("output_jsn" in d for d in c.details)
    assert checks["reward.hacks"].verdict == "skip" and "task.grader" in checks["reward.hacks"].measured


async def test_shared_rows_fail_and_near_duplicates_warn(tmp_path: Path) -> None:
    train, val = good_rows()
    shared = [*val[:8], row("t1-copy", train[1]["messages"][0]["content"], "x"),
              row("t2-typo", train[2]["messages"][0]["content"].replace("follows", "folows"), "y")]
    checks = await static(write_job(tmp_path, train, shared))
    c = checks["data.overlap"]
    assert c.verdict == "fail"
    assert c.measured.startswith("1/10 validation prompts copy") and "1 more are near" in c.measured
    assert "exact: t1-copy = t1" in c.details and any(d.startswith("near: t2-typo ~ t2") for d in c.details)
    near_only = [*val[:7], *(row(f"n{i}", train[i]["messages"][0]["content"].replace("list", "lst"), "z")
                             for i in range(3))]
    checks = await static(write_job(tmp_path, train, near_only))
    assert checks["data.overlap"].verdict == "warn"  # 3/10 near-duplicates > 10 %


async def test_drift_against_a_traffic_file_warns(tmp_path: Path) -> None:
    traffic = [row(f"r{i}", "Please read this long incident report and tell me which service "
                   "failed first, why it failed and what to change " + "detail " * i, None,
                   tools=[{"type": "function", "function": {"name": "shell"}}]) for i in range(12)]
    (tmp_path / "traffic.jsonl").write_text("".join(json.dumps(r) + "\n" for r in traffic))
    checks = await static(write_job(tmp_path, *good_rows()), tmp_path / "traffic.jsonl")
    c = checks["data.drift"]
    assert c.verdict == "warn" and checks["_report"].exit_code == 0  # a warning does not fail
    assert any(d.startswith("train -> traffic: prompt length") for d in c.details)
    assert any("tool 'shell' in 0% vs 100%" in d for d in c.details)
    assert "traffic lacks answer" in c.measured  # real traffic has no answers: not compared
    assert checks["data.sizes"].measured.endswith("traffic 12")


async def test_small_splits_and_no_validation_warn(tmp_path: Path) -> None:
    train, _ = good_rows()
    checks = await static(write_job(tmp_path, train[:5]))
    assert checks["data.sizes"].verdict == "warn"
    assert "add training rows" in checks["data.sizes"].advice
    assert "add a validation_file" in checks["data.sizes"].advice
    assert checks["data.overlap"].verdict == "skip" and checks["data.drift"].verdict == "skip"


async def test_a_hackable_grader_is_caught_by_the_audit(tmp_path: Path) -> None:
    train, val = good_rows()
    train = [{**r, "options": ["zulu", r["answer"], "yankee"]} for r in train]
    checks = await static(write_job(tmp_path, train, val, grader=LIKE))
    c = checks["reward.hacks"]
    assert c.verdict == "fail" and "8/" in c.measured  # all_candidates wins on each of 8 tasks
    assert c.details[0].startswith("all_candidates: 8 task(s)") and "`eq`" in c.advice
    assert checks["reward.continuous"].verdict == "warn"  # string_check: 0 or 1 only
    assert "partial credit" in checks["reward.continuous"].advice


def rollout(task_id: str, reward: float | None, status: str = "ok", error: str | None = None,
            passed: bool | None = None) -> Rollout:
    score = None if reward is None else Score(score=reward, error=error, passed=passed)
    return Rollout(trace_id=new_trace_id(), task_id=task_id, status=status,  # type: ignore[arg-type]
                   messages=(Message(role="assistant", content="a"),), score=score)


def test_variance_verdicts() -> None:
    flat = [rollout(t, 0.0) for t in "abcde" for _ in range(4)]
    c = check_variance(flat, 4)
    assert c.verdict == "fail" and c.measured.startswith("0/5 tasks vary")
    assert c.details == ["5 task(s) always scored 0"] and "rarely succeeds" in c.advice
    solved = [rollout(t, 1.0) for t in "abcd" for _ in range(4)]
    assert "already solves" in check_variance(solved, 4).advice
    split = [rollout(t, 1.0 if t in "ab" else 0.0) for t in "abcd" for _ in range(4)]
    assert "sampling.temperature" in check_variance(split, 4).advice
    one = flat[4:] + [rollout("a", x) for x in (0.0, 0.5, 0.0, 1.0)]
    assert check_variance(one, 4).verdict == "warn"  # 1/5 tasks vary: below 25 %
    mixed = one + [rollout("f", x) for x in (0.2, 0.3)]
    assert check_variance(mixed, 4).verdict == "pass"  # 2/6 tasks vary
    broken = [rollout("a", 0.0, status="infra_failed"), rollout("a", 0.0, error="boom")]
    c = check_variance(broken, 2)
    assert c.verdict == "fail" and "1 infra-failed, 1 grader errors" in c.measured
    hint = "(Reference: answer: {{ item.answer }}.)"
    proposed = check_variance(flat, 4, hint=hint).advice
    assert '`training: {rescue: {hint: "(Reference: answer: {{ item.answer }}.)"}}`' in proposed
    assert "hint" not in check_variance(split, 4, hint=hint).advice  # some succeed: no rescue needed


def test_pass_at_k_verdicts() -> None:
    sometimes = [rollout(t, x) for t in "ab" for x in (1.0, 0.0, 0.0, 0.0)]
    c = check_pass_at_k(sometimes, 4)
    assert c.verdict == "pass" and c.measured == "pass@1 0.250, pass@4 1.000 (+0.750)"
    never = [rollout(t, 0.9) for t in "ab" for _ in range(4)]
    c = check_pass_at_k(never, 4)
    assert c.verdict == "warn" and "no sample passes" in c.advice
    assert check_pass_at_k([rollout("a", 1.0)], 4).verdict == "skip"


def test_render_shows_one_row_per_check_with_advice(tmp_path: Path) -> None:

    report = DoctorReport(job="job.yaml", checks=[
        Check(id="task.fields", principle=1, title="rows have what the grader reads",
              verdict="pass", measured="3 rows", threshold="every row"),
        Check(id="reward.hacks", principle=4, title="adversarial answers earn nothing",
              verdict="fail", measured="2/6 [red]answers", advice="use eq", details=["d1"])])
    console = Console(record=True, width=100)
    render_doctor(report, console)
    text = console.export_text()
    assert "task.fields" in text and "pass" in text and "threshold: every row" in text
    assert "2/6 [red]answers" in text  # user data is never read as markup
    assert "-> use eq" in text and "1 pass, 0 warn, 1 fail, 0 skip" in text


def test_variance_advice_names_constrained_calls_when_calls_fail_on_syntax() -> None:
    """No variance and most attempted calls unparseable or to unknown tools: the advice names
    rollout.constrained_tool_calls and a warm start; once calls are constrained it does not."""
    def bad(task_id: str, constrained: int = 0) -> Rollout:
        unknown = ToolCallRecord(trace_id="t", call_id="c", name="lookup", arguments="{}",
                                 output="Error", status="tool_error", error="unknown tool 'lookup'")
        return rollout(task_id, 0.0).model_copy(update={
            "parse_errors": 2, "tool_calls": (unknown,), "constrained_calls": constrained})

    c = check_variance([bad(t) for t in "abcd" for _ in range(4)], 4, has_tools=True)
    assert c.verdict == "fail"
    assert "48 of 48 attempted tool calls failed on syntax (32 parse errors, 16 unknown tools)" in c.advice
    assert "rollout.constrained_tool_calls: true" in c.advice and "warm-start" in c.advice
    silent = check_variance([rollout(t, 0.0) for t in "abcd" for _ in range(4)], 4, has_tools=True)
    assert "made no tool call" in silent.advice and "tool_choice: required" in silent.advice
    done = check_variance([bad(t, constrained=1) for t in "abcd" for _ in range(4)], 4, has_tools=True)
    assert "constrained_tool_calls: true" not in done.advice and "tool_choice: required" in done.advice
    # Without tools, or with mostly well-formed calls, the plain variance advice stays.
    assert "rarely succeeds" in check_variance([rollout(t, 0.0) for t in "abcd" for _ in range(4)], 4).advice
