"""What ``arft serve`` serves: the models behind the model names of ``/v1/models``.

``served_models(target)``:

* **a run directory** (``arft train`` / ``arft sft``): the tuned agent, its latest checkpoint
  merged into the base weights, named after the run directory (or ``name``) and stamped with
  the checkpoint's step and hash (``arft.app.serve.fingerprint``), and beside it the base model
  under the job's ``model`` name (``base=False`` leaves it out and halves the memory). Both
  render prompts exactly as the run's rollouts did (the same chat format and worked example)
  and constrain tool calls as the run did (``rollout.constrained_tool_calls``);
* **a model** (the embedded default, an HF id, a local directory, a ``.gguf`` file): that model,
  named ``name`` or the reference itself.

Each served model gets its own ``TransformersEngine`` (``arft.engines.factory``, role ``serve``:
continuous batching, KV reuse across the turns of a conversation), or with
``engine_type="vllm"`` a vLLM server (``arft.app.serve.vllm``).
torch and transformers load only here, when a model is served.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from arft.app.serve.chat import ServedModel, ServeError
from arft.app.serve.fingerprint import checkpoint_stamp, model_stamp
from arft.chat.formats import ChatFormat
from arft.config import TransformersEngineSpec, engine_as
from arft.engines.base import TokenEngine
from arft.engines.factory import Policy, build_engine
from arft.engines.transformers.engine import TransformersEngine
from arft.records import PolicyStamp
from arft.rollout.runner import constrained_tool_calls
from arft.tracing.run_dir import RunDir
from arft.trainer.merge import run_job, tuned_model

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def is_run_dir(target: str | Path) -> bool:
    """Whether ``target`` is an arft run directory (it holds a run store)."""
    return RunDir(Path(target)).store.is_file()


def served_models(target: str, *, name: str | None = None, base: bool = True,
                  engine: TransformersEngineSpec | None = None, engine_type: str = "transformers",
                  max_tokens: int = 1024, constrain: bool | None = None, model: Any = None,
                  tokenizer: Any = None, on_status: Callable[[str], None] = lambda s: None
                  ) -> list[ServedModel]:
    """The models to serve for ``target`` (see the module docstring).

    ``engine``: dtype, device, batch size and KV budget (default: the run's ``engine`` section,
    or the defaults). ``engine_type``: ``transformers`` or ``vllm`` (``arft.app.serve.vllm``).
    ``constrain``: hold every tool call to its schema (default: as the run did; on for a plain
    model). ``model``/``tokenizer``: the (base) model, already loaded.
    Raises ``ServeError`` (or ``ModelNotFound``, ``StoreError``, ``EngineError``) with what to do.
    """
    from arft.models.loading import load_model

    if engine_type not in ("transformers", "vllm"):
        raise ServeError(f"engine {engine_type!r} cannot serve: use transformers or vllm")
    if engine_type == "vllm":
        from arft.app.serve.vllm import vllm_models

        return vllm_models(target, name=name, base=base, engine=engine, max_tokens=max_tokens,
                           constrain=constrain, on_status=on_status)
    if not is_run_dir(target):
        spec = engine or TransformersEngineSpec()
        on_status(f"loading model {target}")
        if model is None:
            model, tokenizer = load_model(target, dtype=spec.dtype, device=spec.device)
        fmt = ChatFormat(tokenizer)
        return [_served(name or target, model, tokenizer, fmt, spec, max_tokens, constrain, model_stamp(model))]
    job = run_job(Path(target))
    spec = engine or engine_as(job.engine, "transformers")
    on_status(f"loading {job.model} and merging the checkpoint of {target}")
    base_model = model
    if base_model is None:
        base_model, tokenizer = load_model(job.model_ref, dtype=spec.dtype, device=spec.device)
    stamp = checkpoint_stamp(Path(target))  # before the base is merged into: its hash is step 0's
    base_stamp = model_stamp(base_model) if base else None
    # the checkpoint is merged into a copy when the base is served too, else into the base itself
    _, tuned, _ = tuned_model(Path(target), copy.deepcopy(base_model) if base else base_model, tokenizer)
    tuned.to(device=base_model.device, dtype=base_model.dtype)
    fmt = ChatFormat(tokenizer, worked_example=job.rollout.worked_example)
    option = job.rollout.constrained_tool_calls if constrain is None else constrain
    tuned_name = tuned_name_of(target, name, job.model, base)
    models = [_served(tuned_name, tuned, tokenizer, fmt, spec, max_tokens, option, stamp)]
    if base:
        models.append(_served(job.model, base_model, tokenizer, fmt, spec, max_tokens, option, base_stamp))
    return models


def tuned_name_of(target: str, name: str | None, base_name: str, base: bool) -> str:
    """The tuned model's API name: ``name``, or the run directory's name; it may not be the base's."""
    tuned = name or Path(target).resolve().name
    if base and tuned == base_name:
        raise ServeError(f"the tuned model's name {tuned!r} is the base model's: pick another with "
                         "--name, or serve it alone with --no-base")
    return tuned


def served(name: str, engine: TokenEngine, fmt: ChatFormat, max_tokens: int,
           constrain: bool | str | None) -> ServedModel:
    """``engine`` behind the API name ``name``, tool calls constrained as ``constrain`` says."""
    on = constrained_tool_calls("auto" if constrain is None else constrain, engine)
    return ServedModel(name=name, engine=engine, fmt=fmt, constrain=on, max_tokens=max_tokens)


def _served(name: str, model: Any, tokenizer: "PreTrainedTokenizerBase", fmt: ChatFormat, spec: TransformersEngineSpec,
            max_tokens: int, constrain: bool | str | None, stamp: PolicyStamp | None) -> ServedModel:
    engine = build_engine(None, policy=Policy(model, tokenizer), role="serve", spec=spec)
    if isinstance(engine, TransformersEngine):  # its answers name the weights (arft.app.serve.fingerprint)
        engine.policy = stamp
    return served(name, engine, fmt, max_tokens, constrain)

