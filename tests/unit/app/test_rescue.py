"""Rescue with privileged hints: a group that teaches nothing is sampled again with the hint, the
hinted rollouts that did better replace some of its own, re-based on the prompt without the hint
(the same sampled ids), and train with the correction the job chose. A scripted engine that can
answer only when the hint is in its prompt; the real tokenizer and chat format."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pytest
import torch

from arft.app.rescue import hinted, hinted_tasks, near_identical, prompt_ids, rescue, stuck, with_hint, zero_signal
from arft.config import JobError, JobSpec
from arft.config.sections import BudgetSpec, RescueSpec
from arft.engines.scripted import ScriptedEngine
from arft.records import Message, Rollout, Score, Task
from arft.rollout.runner import RolloutRunner
from arft.tools.registry import Toolbox
from arft.trainer.advantages import batch_advantages
from arft.trainer.batching import micro_batches, to_train_batch
from arft.trainer.learner import sampler_logprobs

EOS = "<|im_end|>"
G = 4


class AnswerGrader:
    name = "answer"

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        return Score(score=1.0 if item["answer"] in sample["output_text"] else 0.0)


def runner(tmp_path: Path, tokenizer: Any) -> RolloutRunner:
    def reply(ids: Sequence[int]) -> str:
        text = tokenizer.decode(list(ids))
        return ("It is " + text.split("The answer is ")[1][:2] if "The answer is " in text else "No idea.") + EOS

    job = JobSpec.model_validate({
        "method": {"type": "reinforcement", "reinforcement": {"grader": {
            "type": "string_check", "name": "unused", "input": "x", "reference": "x", "operation": "eq"}}},
        "rollout": {"max_turns": 2}}).model_copy(update={"base_dir": tmp_path})
    return RolloutRunner.from_job(job, ScriptedEngine(tokenizer, reply), Toolbox(), AnswerGrader())


TASKS = [Task(id=f"t{i}", messages=(Message(role="user", content=f"What is the code of box {i}?"),),
              item={"answer": f"{40 + i}"}) for i in range(2)]


def test_a_hint_goes_at_the_end_of_the_last_user_message() -> None:
    task = hinted(TASKS[0], "Hint: 40.")
    assert task.prompt_messages[-1].content == "What is the code of box 0?\n\nHint: 40."
    assert task.messages == TASKS[0].messages and task.item == TASKS[0].item  # the record keeps none
    assert zero_signal([Rollout(trace_id="a", task_id="t", messages=(), score=Score(score=0.0))] * 2, 1.0)


@pytest.mark.parametrize("correction", ["tis", "none"])
async def test_a_zero_signal_group_is_rescued_on_the_prompt_without_the_hint(
        tmp_path: Path, tokenizer: Any, correction: str) -> None:
    r = runner(tmp_path, tokenizer)
    plain = await r.run_many(TASKS, G, seed=1)
    assert [x.reward for x in plain] == [0.0] * 2 * G  # nobody knows the codes: every group dropped
    assert batch_advantages(plain, G, BudgetSpec()).metrics["train/groups_dropped"] == 2
    spec = RescueSpec(hint="The answer is {{ item.answer }}.", correction=correction)  # type: ignore[arg-type]
    out = await rescue(r, spec, plain, G, TASKS, base_seed=1, step=1)
    assert (out.tried, out.rescued) == (2, 2) and len(out.rollouts) == 2 * G
    group = out.rollouts[:G]
    assert [x.rescued for x in group] == [None, correction, correction, correction]  # keep_unhinted = 1
    assert [x.reward for x in group] == [0.0, 1.0, 1.0, 1.0]
    ids = prompt_ids(r, TASKS[0])
    for x in group[1:]:
        assert x.token_ids[:len(ids)] == tuple(ids) and x.prompt_len == len(ids)  # no hint in the trained ids
        assert "answer is" not in tokenizer.decode(list(x.token_ids))
        assert "It is 40" in tokenizer.decode(list(x.token_ids[len(ids):]))  # what the hinted policy sampled
        assert "answer is" not in (x.messages[0].content or "")  # nor the messages the grader read
    advantages = batch_advantages(out.rollouts, G, BudgetSpec())
    assert advantages.metrics["train/groups_dropped"] == 0
    batch = to_train_batch(out.rollouts, advantages.values)
    assert batch.behaviour_known == tuple(x.rescued != "none" for x in out.rollouts)
    mb = micro_batches(batch, size=16)[0]
    old = torch.full((int(mb.target_mask.sum()),), -9.0)
    sampler = sampler_logprobs(mb, old)
    recorded = mb.old_logprobs[mb.target_mask.bool()]
    if correction == "tis":
        assert torch.equal(sampler, recorded)  # the hinted policy's own logprobs: importance-weighted
    else:
        assert (sampler == -9.0).sum() > 0 and mb.behaviour_known is not None


async def test_hinted_rollouts_are_stored_apart_and_solved_groups_are_left_alone(tmp_path: Path,
                                                                                 tokenizer: Any) -> None:
    r = runner(tmp_path, tokenizer)
    solved = [Rollout(trace_id=f"s{k}", task_id="t0", messages=(), score=Score(score=1.0)) for k in range(G)]
    out = await rescue(r, RescueSpec(hint="The answer is {{ item.answer }}."), solved, G, TASKS[:1],
                       base_seed=1, step=1)
    assert out.rollouts == solved and out.tried == 0  # equal rewards at the mark: nothing to rescue
    missing = await rescue(r, RescueSpec(hint="{{ item.nothing }}"), (await r.run_many(TASKS[:1], G)), G,
                           TASKS[:1], base_seed=1, step=1)
    assert missing.tried == 0  # a row without the hint's fields cannot be helped


class PartialGrader:
    """1 for the answer, 0.5 for "It is" with the wrong digits: partial credit short of the mark."""
    name = "partial"

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        text = sample["output_text"]
        return Score(score=1.0 if item["answer"] in text else 0.5 if "It is" in text else 0.0)


async def test_only_hinted_successes_are_imitated_not_partial_credit(tmp_path: Path, tokenizer: Any) -> None:
    r = runner(tmp_path, tokenizer)
    r.grader = PartialGrader()
    plain = await r.run_many(TASKS, G, seed=1)
    assert [x.reward for x in plain] == [0.0] * 2 * G
    # The hint for box 0 gives the right answer; for box 1 a wrong one, which the grader pays 0.5:
    # better than the group, but not a success, so box 1's group stays as it was (and is dropped).
    tasks = [TASKS[0], TASKS[1].model_copy(update={"item": {"answer": "41", "shown": "99"}})]
    tasks[0] = tasks[0].model_copy(update={"item": {"answer": "40", "shown": "40"}})
    out = await rescue(r, RescueSpec(hint="The answer is {{ item.shown }}."), plain, G, tasks, base_seed=1, step=1)
    assert (out.tried, out.rescued, out.by_rung) == (2, 1, {0: "hint"})
    assert [x.reward for x in out.rollouts[G:]] == [0.0] * G and not any(x.rescued for x in out.rollouts[G:])
    worse = await rescue(r, RescueSpec(hint="The answer is {{ item.shown }}.", mark=0.5), plain, G, tasks,
                         base_seed=1, step=1)
    assert worse.rescued == 2  # with the mark at 0.5, the partial answer is the success asked for


def test_unsolved_groups_count_as_stuck_under_partial_credit() -> None:
    def group(*rewards: float | None) -> list[Rollout]:
        return [Rollout(trace_id=f"r{k}", task_id="t", messages=(),
                        score=None if x is None else Score(score=x)) for k, x in enumerate(rewards)]

    equal, unsolved = RescueSpec(hint="h"), RescueSpec(hint="h", groups="unsolved")
    assert stuck(group(0, 0, 0, 0), equal) and stuck(group(0, 0, 0, 0), unsolved)
    assert not stuck(group(0, 0.25, 0, 0), equal)  # a signal, towards the partial behaviour only
    assert stuck(group(0, 0.25, 0, 0), unsolved)
    assert not stuck(group(0, 1.0, 0, 0), unsolved)  # someone succeeded: RL has what it needs
    assert not stuck(group(0, None, 0, 0), unsolved)  # a failed grade is not a zero: not judged


async def test_an_unsolved_group_takes_only_successes_better_than_its_best(tmp_path: Path, tokenizer: Any) -> None:
    r = runner(tmp_path, tokenizer)
    r.grader = PartialGrader()
    plain = await r.run_many(TASKS[:1], G, seed=1)
    partial = [plain[0].model_copy(update={"score": Score(score=0.5)}), *plain[1:]]  # 0.5, 0, 0, 0
    spec = RescueSpec(hint="The answer is {{ item.answer }}.", groups="unsolved")
    assert (await rescue(r, RescueSpec(hint=spec.hint), partial, G, TASKS[:1], base_seed=1, step=1)).tried == 0
    out = await rescue(r, spec, partial, G, TASKS[:1], base_seed=1, step=1)
    assert (out.tried, out.rescued) == (1, 1)
    assert [x.reward for x in out.rollouts] == [0.5, 1.0, 1.0, 1.0]  # one of its own stays, the contrast


GRADER_PY = '''
def check(row, text):
    return row["expected"] in text

def grade(sample, item):
    return float(check(item, sample["output_text"]))
'''


def _job(tmp_path: Path, grader: dict[str, Any], hint: str = "auto") -> JobSpec:
    return JobSpec.model_validate({
        "method": {"type": "reinforcement", "reinforcement": {"grader": grader}},
        "training": {"rescue": {"hint": hint}}}).model_copy(update={"base_dir": tmp_path})


def test_hint_auto_is_built_from_the_fields_the_grader_reads(tmp_path: Path) -> None:
    (tmp_path / "grader.py").write_text(GRADER_PY)
    multi = {"type": "multi", "name": "both", "calculate_output": "a * b", "graders": {
        "a": {"type": "string_check", "name": "a", "input": "{{ sample.output_text }}",
              "reference": "{{ item.answer }}", "operation": "eq"},
        "b": {"type": "python", "name": "b", "source_file": "grader.py"}}}
    job = with_hint(_job(tmp_path, multi))
    assert job.training.rescue is not None
    hint = job.training.rescue.hint
    # The template reads exactly what the grader reads, the python helper's subscript included.
    assert hint == ('(Reference for this task, which a correct answer agrees with: answer: {{ item.answer }}; '
                    'expected: {{ item["expected"] }}.)')
    [task] = hinted_tasks([TASKS[0].model_copy(update={"item": {"answer": "40", "expected": "x"}})], hint)
    assert task.hint is not None and "answer: 40; expected: x." in task.hint
    assert hinted_tasks(TASKS[:1], hint)[0].hint is None  # a row without the fields keeps no hint
    written = _job(tmp_path, multi, hint="Say {{ item.answer }}")
    assert with_hint(written) is written  # a written template is left as it is


def test_hint_auto_on_a_grader_that_reads_no_item_field_says_what_to_write(tmp_path: Path) -> None:
    blind = {"type": "string_check", "name": "s", "input": "{{ sample.output_text }}", "reference": "yes",
             "operation": "eq"}
    with pytest.raises(JobError, match="reads none .* write the hint as a template"):
        with_hint(_job(tmp_path, blind))


class HotterKnowsBoxZero(ScriptedEngine):
    """Answers box 0 only when sampled hotter than 1 (a peaked policy whose one right answer a
    hotter sampler finds), and any box whose answer the prompt gives (the hint)."""

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer, lambda ids: "")
        self.temperatures: list[float] = []

    async def generate(self, prompt_ids: Sequence[int], params: Any, on_tokens: Any = None) -> Any:
        self.temperatures.append(params.temperature)
        text = self.tokenizer.decode(list(prompt_ids))
        if "The answer is " in text:
            self._replies = lambda ids: "It is " + text.split("The answer is ")[1][:2] + EOS
        elif params.temperature > 1 and "box 0" in text:
            self._replies = lambda ids: "It is 40" + EOS
        else:
            self._replies = lambda ids: "No idea." + EOS
        return await super().generate(prompt_ids, params, on_tokens)


async def test_the_exploration_rung_goes_first_and_only_stuck_groups_go_on_to_the_hint(
        tmp_path: Path, tokenizer: Any) -> None:
    r = runner(tmp_path, tokenizer)
    r.engine = engine = HotterKnowsBoxZero(tokenizer)
    plain = await r.run_many(TASKS, G, seed=1)
    assert [x.reward for x in plain] == [0.0] * 2 * G and near_identical(plain[:G], 0.9)
    spec = RescueSpec(hint="The answer is {{ item.answer }}.", explore_temperature=1.5)
    out = await rescue(r, spec, plain, G, TASKS, base_seed=1, step=1)
    assert (out.tried, out.rescued, out.by_rung) == (2, 2, {0: "explore", 1: "hint"})
    explored, hinted_group = out.rollouts[:G], out.rollouts[G:]
    assert [x.rescued for x in explored] == [None, "explore", "explore", "explore"]
    assert [x.rescued for x in hinted_group] == [None, "none", "none", "none"]  # the default correction
    ids = prompt_ids(r, TASKS[0])
    assert all(x.token_ids[:len(ids)] == tuple(ids) for x in explored)  # the plain prompt: nothing to re-base
    # Both groups were sampled hotter first (both were near-identical); only box 1 went on to the hint.
    assert engine.temperatures.count(1.5) == 2 * G and r.params.temperature == 1.0
    assert batch_advantages(out.rollouts, G, BudgetSpec()).metrics["train/groups_dropped"] == 0


def test_near_identical_compares_the_sampled_tokens_after_the_prompt() -> None:
    def sampled(*ids: int) -> Rollout:
        return Rollout(trace_id="t", task_id="t", messages=(), token_ids=(9, 9, *ids), prompt_len=2)

    assert near_identical([sampled(1, 2, 3, 4)] * 3, 1.0)
    assert not near_identical([sampled(1, 2, 3, 4), sampled(5, 6, 7, 8)], 0.5)
    assert near_identical([sampled(1, 2, 3, 4), sampled(1, 2, 3, 5)], 0.75)  # Indel: 6 of 8 kept
    # Only the policy's own tokens count: tool results (loss mask 0) that differ do not.
    with_results = [Rollout(trace_id="t", task_id="t", messages=(), token_ids=(9, 1, 2, result, 3), prompt_len=1,
                            loss_mask=(0, 1, 1, 0, 1)) for result in (50, 60, 70)]
    assert near_identical(with_results, 1.0)


def test_rescue_needs_a_rung() -> None:
    with pytest.raises(ValueError, match="needs a rung"):
        RescueSpec()
