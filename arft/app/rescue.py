"""Rescue groups that teach nothing with privileged hints (``training.rescue``).

Where the policy never succeeds on a task, every rollout of its group gets the same reward, the
group has no advantage, and GRPO drops it. Real rows usually carry what a teacher would know (the
reference answer, the expected call). For such a group the task is sampled again with that
knowledge appended to its last user message (``RescueSpec.hint``, a template over the row;
``Task.hint``), and graded as usual: the rollout's messages, which the grader reads, never hold the
hint. They are stored under ``RESCUE_RUN_ID``. Hinted rollouts that succeeded (reached
``RescueSpec.mark``) replace some of its rollouts (``keep_unhinted`` of its own stay, for the contrast), each
**re-based on the prompt without the hint**: the ids of the un-hinted prompt, then exactly the ids
the hinted policy sampled and the tool results it got (token in, token out). So the update
teaches the policy to act, without the hint, as it acted with it (``RescueSpec.unhinted``: the
group's own rollouts are pushed down against the successes, or only set their baseline and do not
train, ``trainer.advantages.batch_advantages``). Only successes are imitated:
a hinted rollout that did merely better (partial credit for pasting the tool's output, say)
would teach, without the hint, what the hint did not mean.

The sampler of those tokens was the hinted policy, not the one being trained. How the loss
weights them (``RescueSpec.correction``): ``none`` (the default) counts them as sampled by the
policy itself (weight 1): a biased, imitation-like push, as a warm start imitates a teacher.
``tis`` keeps the hinted policy's recorded logprobs, so the loss's truncated importance weight
``min(pi(a | x) / mu(a | x, hint), tis_cap)`` applies; it is honest, and near 0 exactly where the
hint mattered most, so it learns little (measured: ``python -m bench run rescue``, docs/training.md).
Evaluations never see a hint.

Which groups are stuck (``RescueSpec.groups``): ``equal``, the zero-signal ones above; or
``unsolved``, every group none of whose rollouts reached ``mark``. Under partial credit a group of
0, 0.25, 0, 0 has a signal, but only towards the partial behaviour (pasting the tool's output),
never towards the success the hint shows.

A cheaper rung comes first (``explore_temperature``): a stuck group whose samples are
near-identical (``near_identical``: the grammar and a peaked policy often sample the same call
every time) is sampled again, without a hint, at a higher temperature. Those rollouts are on the
un-hinted prompt already; their recorded logprobs are the hotter sampler's, so the loss's
truncated importance weight corrects for the temperature as for any stale sampler. Only groups
still stuck go on to the hint. ``Rescued.by_rung`` says which rung rescued each group.

``hint: auto`` builds the hint from the item fields the grader reads (``reference_hint``: the
same reads ``arft doctor`` checks rows for); ``arft doctor`` proposes that hint when its baseline
finds tasks that never succeed. ``arft train --warm-start K`` samples with the hint too
(``hinted_tasks``), and imitates the successes from the prompts without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Sequence

from rapidfuzz.distance import Indel

from arft.config import JobError, JobSpec
from arft.config.sections import BudgetSpec
from arft.graders.templates import _parse_path, render_template, TemplateError
from arft.graders.validate import item_reads
from arft.records import Rollout, Task
from arft.rollout.loop import task_tool_schemas
from arft.rollout.runner import RolloutRunner
from arft.seeds import EXPLORE_SEED_OFFSET, HINT_SEED_OFFSET, step_seed
from arft.trainer.advantages import budget_penalty_of, shaped_group_advantages

if TYPE_CHECKING:
    from arft.config.sections import RescueSpec

RESCUE_RUN_ID = "train:rescue"
"""The run id the hinted rollouts are stored under (they are graded, never trained as stored)."""


def stuck(group: Sequence[Rollout], spec: RescueSpec, budget: BudgetSpec | None = None) -> bool:
    """The group is one rescue samples again (``RescueSpec.groups``): a zero-signal group, or under
    ``unsolved`` any fully graded group none of whose rollouts reached the mark."""
    if spec.groups == "unsolved":
        graded = [r.reward for r in group if r.reward is not None]
        return len(graded) == len(group) and max(graded, default=spec.mark) < spec.mark
    return zero_signal(group, spec.mark, budget)


def zero_signal(group: Sequence[Rollout], mark: float, budget: BudgetSpec | None = None) -> bool:
    """The group is one the trainer drops for zero reward variance (``shaped_group_advantages``:
    the same shaped rewards, the budget penalty included), every rollout graded below ``mark``."""
    penalties = [budget_penalty_of(r, budget or BudgetSpec()) for r in group]
    advantages = shaped_group_advantages(group, penalties)
    graded = [r.reward for r in group if r.reward is not None]
    return (advantages.dropped and len(graded) == len(group) and advantages.reason == "zero reward variance"
            and max(graded) < mark)


AUTO_HINT = "auto"
"""``training.rescue.hint: auto``: the hint is ``reference_hint`` of the job's grader."""


def reference_hint(job: JobSpec) -> str | None:
    """A hint template over every item field the grader reads (``{{ item.* }}`` templates,
    ``item["key"]`` in a python grader and its helpers), or None when it reads none."""
    paths = list(dict.fromkeys(path for _, path in item_reads(job.rl.grader_dict, job.base_dir)))
    if not paths:
        return None
    fields = "; ".join(f"{_field_name(p)}: {{{{ {p} }}}}" for p in paths)
    return f"(Reference for this task, which a correct answer agrees with: {fields}.)"


def _field_name(path: str) -> str:
    """``item.answer`` / ``item["answer"]`` -> ``answer`` (the words the hint shows the policy),
    read with the templates' own path parser."""
    try:
        _, steps = _parse_path(path)
    except TemplateError:
        return path
    return ".".join(str(step) for step in steps) or path


def with_hint(job: JobSpec) -> JobSpec:
    """``job`` with ``training.rescue.hint: auto`` replaced by the template it stands for (so the
    run's recorded job shows the hint the policy saw); other jobs unchanged."""
    spec = job.training.rescue
    if spec is None or spec.hint is None or spec.hint.strip() != AUTO_HINT:
        return job
    hint = reference_hint(job)
    if hint is None:
        raise JobError("training.rescue.hint: auto builds the hint from the item fields the grader reads, and "
                       "this grader reads none (`arft doctor JOB` lists them): write the hint as a template "
                       "over the row, e.g. \"The expected answer is {{ item.answer }}\"")
    training = job.training.model_copy(update={"rescue": spec.model_copy(update={"hint": hint})})
    return job.model_copy(update={"training": training})


def hinted_tasks(tasks: Sequence[Task], template: str) -> list[Task]:
    """``tasks`` with ``template`` rendered over each row as its hint; a row that lacks the
    template's fields keeps no hint (it cannot be helped)."""
    out = []
    for task in tasks:
        try:
            out.append(hinted(task, render_template(template, {}, task.item)))
        except TemplateError:
            out.append(task)
    return out


def hinted(task: Task, hint: str) -> Task:
    """``task`` whose prompt carries ``hint`` (``Task.hint``: the policy sees it, the rollout's
    messages and so the grader do not)."""
    return task.model_copy(update={"hint": hint})


def rebased(rollout: Rollout, prompt_ids: Sequence[int], correction: str) -> Rollout:
    """``rollout`` (sampled from a hinted prompt) as if sampled from ``prompt_ids``: the same
    sampled ids, tool results, logprobs and mask after the prompt."""
    n, p = rollout.prompt_len, len(prompt_ids)
    constrained = rollout.constrained_mask
    return rollout.model_copy(update={
        "token_ids": tuple(prompt_ids) + rollout.token_ids[n:],
        "loss_mask": (0,) * p + rollout.loss_mask[n:], "logprobs": (0.0,) * p + rollout.logprobs[n:],
        "constrained_mask": (0,) * p + constrained[n:] if constrained else (),
        "prompt_len": p, "rescued": correction})


def near_identical(group: Sequence[Rollout], similarity: float) -> bool:
    """The group's sampled tokens (the policy's own, ``loss_mask`` 1: not the prompt nor the tool
    results) are alike: their mean pairwise normalised Indel similarity is at least ``similarity``.
    Such a group gains nothing from being sampled again the same way; a hotter sampler may find
    what it missed."""
    sampled = [[t for t, m in zip(r.token_ids, r.loss_mask) if m] if r.loss_mask else list(r.token_ids[r.prompt_len:])
               for r in group]
    pairs = [(a, b) for i, a in enumerate(sampled) for b in sampled[i + 1:]]
    if not pairs:
        return True
    return sum(Indel.normalized_similarity(a, b) for a, b in pairs) / len(pairs) >= similarity


Rung = Literal["explore", "hint"]


@dataclass
class Rescued:
    """The step's rollouts after rescue, and what rescue did."""

    rollouts: list[Rollout]
    tried: int
    """Groups sampled again (on either rung; a group that goes through both counts once)."""
    rescued: int
    """Groups that now hold at least one new rollout that did better."""
    by_rung: dict[int, Rung] = field(default_factory=dict)
    """The rung that rescued each rescued group (its index in the step's tasks)."""


async def rescue(runner: RolloutRunner, spec: RescueSpec, rollouts: list[Rollout], group_size: int,
                 tasks: Sequence[Task], *, base_seed: int, step: int, budget: BudgetSpec | None = None) -> Rescued:
    """Rescue the stuck groups of one step (``rollouts``: ``group_size`` per task of ``tasks``, in
    order; ``stuck``): the exploration rung, then the hint rung; see the module docstring."""
    groups = [rollouts[i:i + group_size] for i in range(0, len(rollouts), group_size)]
    todo = [i for i, group in enumerate(groups) if stuck(group, spec, budget)]
    tried: set[int] = set()
    by_rung: dict[int, Rung] = {}
    redo = _Redo(spec, groups, group_size, step, spec.samples or group_size)
    if spec.explore_temperature is not None:
        same = [i for i in todo if near_identical(groups[i], spec.similarity)]
        hot = replace(runner, params=runner.params.model_copy(update={"temperature": spec.explore_temperature}))
        tried.update(same)
        for i in await redo.run(hot, [(i, tasks[i]) for i in same], base_seed + EXPLORE_SEED_OFFSET,
                                lambda r, i: r.model_copy(update={"rescued": "explore"}), need=None):
            by_rung[i] = "explore"
    if spec.hint is not None:
        hint = spec.hint
        hints = [(i, t) for i in todo if i not in by_rung
                 for t in hinted_tasks([tasks[i]], hint) if t.hint is not None]
        tried.update(i for i, _ in hints)
        for i in await redo.run(runner, hints, base_seed + HINT_SEED_OFFSET,
                                lambda r, i: rebased(r, prompt_ids(runner, tasks[i]), spec.correction),
                                need=spec.mark):
            by_rung[i] = "hint"
    return Rescued([r for g in groups for r in g], len(tried), len(by_rung), by_rung)


@dataclass
class _Redo:
    """One rung's resampling: stuck groups sampled again, the better rollouts swapped in."""

    spec: RescueSpec
    groups: list[list[Rollout]]
    group_size: int
    step: int
    samples: int

    async def run(self, runner: RolloutRunner, todo: list[tuple[int, Task]], seed: int,
                  as_trained: Callable[[Rollout, int], Rollout], *, need: float | None) -> list[int]:
        """Sample each ``(group index, task)`` again; the rollouts that did better than the group
        and reached ``need`` (None: any better one will do) replace its last ones, best first,
        ``keep_unhinted`` of its own kept, made into what is trained by ``as_trained``. Returns
        the indices of the groups that got one."""
        if not todo:
            return []
        n = self.samples
        more = await runner.run_many([t for _, t in todo], n, run_id=RESCUE_RUN_ID, step=self.step,
                                     seed=step_seed(seed, self.step, n))
        won = []
        for k, (i, _) in enumerate(todo):
            floor = max((r.reward for r in self.groups[i] if r.reward is not None), default=None)
            better = sorted((r for r in more[k * n:(k + 1) * n]
                             if r.reward is not None and floor is not None and r.reward > floor and r.token_ids
                             and (need is None or r.reward >= need)),
                            key=lambda r: -(r.reward or 0.0))[:self.group_size - self.spec.keep_unhinted]
            if better:
                kept = self.groups[i][:self.group_size - len(better)]
                self.groups[i] = kept + [as_trained(r, i) for r in better]
                won.append(i)
        return won


def prompt_ids(runner: RolloutRunner, task: Task) -> list[int]:
    """The first prompt's ids of ``task`` exactly as the runner's own rollouts render it."""
    conv = runner.conversation(task)
    conv.start(task.messages, task_tool_schemas(task, runner.toolbox.tools))
    return list(conv.token_fields()["token_ids"])
