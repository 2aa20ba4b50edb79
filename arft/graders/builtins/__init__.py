"""Built-in reward designs from real Agent RFT deployments, usable from a job as
``{"type": "builtin", "name": "<design>", ...}`` and importable inside python graders.

Each design lives in its own module with ``build(spec: dict, base_dir: Path) -> Grader``, which
validates with the design's spec model from ``arft.config.builtin_graders``; adding one is one
line in ``designs`` plus its spec model there (in the job's typed ``BuiltinGraderSpec``).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from arft.graders.base import Grader, GraderError


def designs() -> dict[str, str]:
    """Built-in design name -> ``module:function`` of its builder."""
    return {
        "set_f1": "arft.graders.builtins.sets:build_set_f1",
        "fact_recall": "arft.graders.builtins.fact_recall:build",
        "tests_pass": "arft.graders.builtins.tests_pass:build",
        "style_penalty": "arft.graders.builtins.style:build",
        "verification_bonus": "arft.graders.builtins.trajectory_rewards:build_verification_bonus",
        "tool_budget": "arft.graders.builtins.trajectory_rewards:build_tool_budget",
        "ast_guard": "arft.graders.builtins.ast_guard:build",
        "judge_hack_check": "arft.graders.builtins.judge_hack:build",
    }


def build(spec: dict[str, object], base_dir: Path) -> Grader:
    """The built-in grader named by ``spec["name"]``."""
    table = designs()
    name = spec.get("name")
    if not isinstance(name, str) or name not in table:
        raise GraderError(f"builtin grader: name {name!r} is not a built-in design; use one of: "
                          f"{', '.join(sorted(table))}")
    module_name, func_name = table[name].split(":")
    return getattr(importlib.import_module(module_name), func_name)(spec, base_dir)
