"""`arft report` end to end: a recorded run in a real SQLite store (hand-written, and a real 2-step
training of the tiny model), an `arft eval` run directory, and runs whose metrics are missing."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from arft.cli.main import app as cli
from arft.config import load_job
from arft.records import Rollout, Score
from arft.report.html import write_report
from arft.tracing.store import RunStore
from tests.integration.test_train import tiny, write_job
from tests.unit.tracing.factories import make_rollout

VIEWER = "http://127.0.0.1:8321"
SECTIONS = ["Summary", "Reward", "Sub-grader scores", "Evaluations", "Tool calls per rollout",
            "Tool usage over steps", "Tool latency and errors", "Tokens per rollout", "Update metrics",
            "Best and worst rollouts"]
IMG = re.compile(r'<img alt="([^"]+)" src="data:image/png;base64,([A-Za-z0-9+/=]+)">')
LINK = re.compile(r'href="([^"]+)/rollouts/(trace_[0-9a-f]+)"')


def _r(run_id: str, step: int | None, task: str, reward: float, n_calls: int, **kw: Any) -> Rollout:
    score = Score(score=reward, sub_scores={"correct": reward, "brevity": 1.0 - n_calls / 20})
    r = make_rollout(task, run_id=run_id, score=score, calls=[("search", i // 2) for i in range(n_calls)]
                     + [("read", 9)], n_tokens=40 + 4 * n_calls, **kw)
    return r.model_copy(update={"step": step})


def recorded_run(run_dir: Path, *, metrics: bool = True, steps_known: bool = True) -> dict[str, list[str]]:
    """A 3-step train run with evals at steps 0 and 3: the baseline has a long tail of tool calls,
    the final eval makes few. Returns the trace_ids of each run."""
    ids: dict[str, list[str]] = {}
    with RunStore(run_dir / "arft.sqlite") as store:
        store.create_run("train", "train", {"model": "tiny-test-model", "suffix": "demo",
                                            "training": {"kl_coef": 0.0, "max_steps": 3}})
        evals = {0: [(0.0, 1), (0.2, 3), (0.1, 14), (0.0, 18)], 3: [(1.0, 2), (0.9, 2), (0.7, 3), (0.6, 1)]}
        for step in (1, 2, 3):
            rollouts = [_r("train", step if steps_known else None, f"t{i}", 0.25 * step + 0.05 * i,
                           10 - 3 * step + i, sample_index=i) for i in range(4)]
            for r in rollouts:
                store.add_rollout(r)
            ids.setdefault("train", []).extend(r.trace_id for r in rollouts)
            if metrics:
                store.add_metrics("train", step, {
                    "train/rollouts": 4.0, "train/groups": 2.0, "train/groups_dropped": float(step == 2),
                    "update/tokens": 100.0 * step, "update/kl": 0.0, "update/grad_norm": 1.0 / step,
                    "update/lr": 1e-4, "update/clip_fraction": 0.1 * step, "time/step_s": 2.0 + step})
        for step, rows in evals.items():
            run_id = f"train:eval-{step:06d}"
            store.create_run(run_id, "eval", {"step": step})
            rollouts = [_r(run_id, step, f"v{i}", reward, calls) for i, (reward, calls) in enumerate(rows)]
            for r in rollouts:
                store.add_rollout(r)
            store.finish_run(run_id, "completed")
            ids[run_id] = [r.trace_id for r in rollouts]
        store.finish_run("train", "completed")
    return ids


def images(html: str) -> dict[str, bytes]:
    found = {alt: base64.b64decode(data) for alt, data in IMG.findall(html)}
    assert all(png.startswith(b"\x89PNG") for png in found.values())
    return found


def assert_self_contained(html: str, viewer: str = VIEWER) -> None:
    """No external CSS, JS or images: every src is a data URI, every link goes to the viewer."""
    assert "<script" not in html and "<link" not in html
    assert all(src.startswith("data:image/png;base64,") for src in re.findall(r'src="([^"]*)"', html))
    assert all(href.startswith(f"{viewer}/rollouts/trace_") for href in re.findall(r'href="([^"]*)"', html))


def test_train_report_shows_every_section_with_its_figure(tmp_path: Path) -> None:
    ids = recorded_run(tmp_path)
    html = write_report(tmp_path).read_text()
    assert_self_contained(html)
    for title in SECTIONS:
        assert f"<h2>{title}</h2>" in html, title
    figs = images(html)
    assert set(figs) == {"Reward over steps", "Sub-grader scores", "Tool calls per rollout",
                         "Tool calls per rollout by tool", "Tool latency and errors",
                         "Tokens per rollout", "Update metrics"}
    assert "3 / 3" in html and "tiny-test-model" in html
    assert "0.075 → <b>0.800</b>" in html  # baseline vs final eval reward
    # update/kl is 0.0 at every step because kl_coef is 0: said in words, not drawn as a line
    assert "<code>update/kl</code> — not recorded: training.kl_coef is 0" in html
    assert "<code>update/entropy</code> — not recorded in any step" in html
    assert "The same at every step: <code>update/lr</code> = 0.0001" in html
    # best/worst link to the viewer with real trace_ids; the best final-eval rollout comes first
    links = LINK.findall(html)
    assert {url for url, _ in links} == {VIEWER}
    stored = {t for ts in ids.values() for t in ts}
    assert {t for _, t in links} <= stored
    best_eval = html.index("<h3>Best — latest eval (step 3)</h3>")
    assert LINK.search(html, best_eval).group(2) == ids["train:eval-000003"][0]  # type: ignore[union-attr]
    worst_eval = html[html.index("<h3>Worst — latest eval (step 3)</h3>"):html.index("<h3>Best — train")]
    # the top reward (1.0) is never among the worst; the worst is the 0.6 rollout
    assert [t for _, t in LINK.findall(worst_eval)] == [ids["train:eval-000003"][i] for i in (3, 2, 1)]
    worst_train = html.index("<h3>Worst — train (all steps)</h3>")
    assert LINK.search(html, worst_train).group(2) == ids["train"][0]  # type: ignore[union-attr]


def test_cli_report_with_missing_metrics_says_not_recorded(tmp_path: Path) -> None:
    """An old store (no per-rollout steps) without metrics: nothing over steps can be drawn, and
    the page says so instead of plotting zeros."""
    recorded_run(tmp_path / "run", metrics=False, steps_known=False)
    out = tmp_path / "elsewhere" / "r.html"
    res = CliRunner().invoke(cli, ["report", str(tmp_path / "run"), "--out", str(out),
                                   "--viewer-url", "http://viewer.test:9/"])
    assert res.exit_code == 0, res.output
    assert str(out) in res.output.replace("\n", "") and "arft view" in res.output
    html = out.read_text()
    assert_self_contained(html, "http://viewer.test:9")
    assert "not recorded (the run has no metrics)" in html
    assert "12 train rollouts could not be assigned to a step" in html
    assert html.count("not recorded: no train rollout has a known step yet") == 1  # tool usage
    update = html[html.index("<h2>Update metrics</h2>"):]
    assert update.index("not recorded: the run has no update metrics") < update.index("</section>")
    figs = images(html)
    assert "Update metrics" not in figs and "Tool calls per rollout by tool" not in figs
    assert {"Reward over steps", "Tool calls per rollout", "Tool latency and errors"} <= set(figs)


def test_old_store_steps_come_from_the_metrics(tmp_path: Path) -> None:
    recorded_run(tmp_path, steps_known=False)
    html = write_report(tmp_path).read_text()
    assert "assigned to steps in the order they were stored" in html
    assert "Tool calls per rollout by tool" in images(html)


async def test_eval_only_run_directory(tmp_path: Path, tokenizer: Any, tiny_model: Any) -> None:
    from arft.engines.transformers.engine import TransformersEngine
    from arft.app.evaluate import evaluate
    from arft.data.splits import load_split

    job = load_job(write_job(tmp_path))
    engine = TransformersEngine(tiny_model, tokenizer, max_batch_size=4)
    try:
        result = await evaluate(job, load_split(job, "validation", None), 2, tmp_path / "ev", engine=engine)
    finally:
        await engine.aclose()
    html = write_report(tmp_path / "ev").read_text()
    assert_self_contained(html)
    for title in SECTIONS:
        assert f"<h2>{title}</h2>" in html, title
    assert "not recorded: an evaluation run has no training steps" in html
    assert "steps</th>" not in html  # no "steps 0 / ?" line for an eval
    assert set(images(html)) == {"Tool calls per rollout"}  # the one eval's histogram
    assert {r.score.score for r in result.rollouts if r.score} == {1.0}  # the job's grader: always 1
    assert "<h3>Worst — evaluation</h3><p class=\"na\">none: every graded rollout scored 1.000</p>" in html
    linked = {t for _, t in LINK.findall(html)}
    assert linked and linked <= {r.trace_id for r in result.rollouts}


class PartsGrader:
    """A continuous reward with two sub-scores (length and vowels), so groups have variance."""

    name = "parts"

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        text = sample["output_text"]
        length = (len(text) % 13) / 12.0
        vowels = sum(c in "aeiou" for c in text) / max(len(text), 1)
        return Score(score=(length + vowels) / 2, sub_scores={"length": length, "vowels": vowels})


async def test_report_of_a_real_training_run(tmp_path: Path, tokenizer: Any) -> None:
    from arft.app.train import train

    job = load_job(write_job(tmp_path))
    job = job.model_copy(update={"training": job.training.model_copy(update={"max_steps": 2, "group_size": 2,
                                                                              "checkpoint_every": 2})})
    await train(job, tmp_path / "run", model=tiny(tokenizer), tokenizer=tokenizer, grader=PartsGrader(),
                max_batch_size=4)
    html = write_report(tmp_path / "run").read_text()
    assert_self_contained(html)
    figs = images(html)
    assert {"Reward over steps", "Sub-grader scores", "Tool calls per rollout", "Tokens per rollout",
            "Update metrics"} <= set(figs)
    assert "2 / 2" in html and "baseline → final eval reward" in html
    assert "<th>length</th>" in html or 'class="num">length</th>' in html  # sub-score column
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    recorded = {json.loads(line)["step"] for line in lines}
    assert recorded == {0, 1, 2}
    with RunStore(tmp_path / "run" / "arft.sqlite") as store:
        stored = {r.trace_id for r in store.rollouts()}
    linked = {t for _, t in LINK.findall(html)}
    assert linked and linked <= stored
