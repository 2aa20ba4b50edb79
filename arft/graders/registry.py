"""Build a grader from its spec, and grade a rollout without ever raising.

Grader modules are imported only when their type is used, so a heavy grader (a model judge, a
sandboxed python grader) costs nothing to jobs that do not use it. Adding a grader type is one
line in ``grader_types``: ``"<type>": "arft.graders.<module>:build"``, where
``build(spec: dict, base_dir: Path) -> Grader``, plus its spec model in ``arft.config.graders``
(in the job's typed ``GraderSpec``; a test holds the two lists equal), which the builder imports
and validates with: a spec model is defined once, in ``arft.config``.
"""

from __future__ import annotations

import importlib
import math
import time
from pathlib import Path
from typing import Callable

from pydantic import BaseModel

from arft.config.graders import as_written
from arft.graders.base import Grader, GraderError, build_sample
from arft.records import Rollout, Score

Builder = Callable[[dict[str, object], Path], Grader]


def grader_types() -> dict[str, str]:
    """Supported grader types -> ``module:function`` of their builder."""
    return {
        "string_check": "arft.graders.string_check:build",
        "text_similarity": "arft.graders.text_similarity:build",
        "score_model": "arft.graders.model_graders:build_score_model",
        "label_model": "arft.graders.model_graders:build_label_model",
        "python": "arft.graders.python_grader:build",
        "multi": "arft.graders.multi:build",
        "endpoint": "arft.graders.endpoint:build",
        "builtin": "arft.graders.builtins:build",
    }


def build_grader(spec: object, base_dir: Path) -> Grader:
    """The grader for ``spec``; ``base_dir`` (the job file's folder) resolves any file it names.

    ``spec`` is a job's typed grader (``job.rl.grader``, an ``arft.config.GraderSpec``) or the
    same spec as a dict (``arft grade --grader G.json``). Raises ``GraderError`` for a spec that is
    not a mapping, has no ``type``, has a type arft does not support (listing the supported ones),
    or has bad fields (naming the grader and field).
    """
    if isinstance(spec, BaseModel):
        spec = as_written(spec)
    types = grader_types()
    supported = ", ".join(sorted(types))
    if not isinstance(spec, dict):
        raise GraderError(f"a grader spec must be a mapping with a 'type' (one of: {supported}), "
                          f"got {type(spec).__name__}")
    kind = spec.get("type")
    if kind is None:
        raise GraderError(f"grader {spec.get('name', '(unnamed)')!r} has no 'type'; "
                          f"set it to one of: {supported}")
    if not isinstance(kind, str) or kind not in types:
        raise GraderError(f"grader {spec.get('name', '(unnamed)')!r}: type {kind!r} is not "
                          f"supported; use one of: {supported}")
    module_name, func_name = types[kind].split(":")
    builder: Builder = getattr(importlib.import_module(module_name), func_name)
    return builder(spec, base_dir)


def _error_score(name: str, exc: BaseException | str, latency_s: float) -> Score:
    reason = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    return Score(score=0.0, error=f"{name}: {reason}", grader=name, latency_s=latency_s)


async def grade_rollout(grader: Grader, rollout: Rollout, workspace: Path | None = None) -> Score:
    """Grade ``rollout`` (see ``grade_sample``); never raises (except cancellation)."""
    name = str(getattr(grader, "name", None) or type(grader).__name__)
    try:
        sample = build_sample(rollout, workspace)
    except Exception as e:  # noqa: BLE001 - a broken sample must not stop training
        return _error_score(name, e, 0.0)
    return await grade_sample(grader, sample, rollout.item)


async def grade_sample(grader: Grader, sample: dict[str, object], item: dict[str, object]) -> Score:
    """Grade one sample; never raises (except cancellation).

    Any exception from the grader, a result that is not a ``Score``, or a non-finite score
    becomes ``Score(score=0.0, error="<grader>: <reason>")`` so the rollout loop can count it as
    a grader error. ``latency_s`` is the grading time and ``grader`` is the grader's name.
    """
    name = str(getattr(grader, "name", None) or type(grader).__name__)
    start = time.perf_counter()
    try:
        score = await grader.grade(sample, item)
    except Exception as e:  # noqa: BLE001 - a broken grader must not stop training
        return _error_score(name, e, time.perf_counter() - start)
    latency = time.perf_counter() - start
    if not isinstance(score, Score):
        return _error_score(name, f"returned {type(score).__name__}, expected a Score", latency)
    if not math.isfinite(score.score):
        return _error_score(name, f"returned a non-finite score {score.score}", latency)
    return score.model_copy(update={"latency_s": latency, "grader": score.grader or name})
