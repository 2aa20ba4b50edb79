"""``arft serve --engine vllm``: the served models behind one vLLM server arft starts.

* **a LoRA run**: the server holds the base weights and loads the run's adapter (its latest
  checkpoint, written as a peft folder in ``RUN_DIR/serve-vllm/adapter``) under the tuned name,
  so the tuned agent and its base are served by one server and one copy of the weights;
* **a full fine-tune**: the server holds the tuned weights (merged, bf16, in
  ``RUN_DIR/serve-vllm/weights``); its base would need a second server, so ``base`` must be off;
* **a model**: the server holds it (its log in a temporary folder, printed).

Prompts are rendered and tool calls constrained as with the transformers engine (``ServedModel``
over ``VLLMEngine``); replies come whole (the vLLM engine does not stream tokens to arft, so a
``stream: true`` request gets its chunks once the reply is done). The server's output goes to
``serve-vllm/vllm.log``; it stops when arft serve exits.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

from arft.app.serve.chat import ServedModel, ServeError
from arft.chat.formats import ChatFormat
from arft.config import JobSpec, TransformersEngineSpec, VLLMEngineSpec, engine_as


def vllm_models(target: str, *, name: str | None, base: bool, engine: TransformersEngineSpec | None, max_tokens: int,
                constrain: bool | None, on_status: Callable[[str], None]) -> list[ServedModel]:
    """The served models of ``target`` over one vLLM server (see the module docstring)."""
    from arft.app.serve.models import is_run_dir, served
    from arft.engines.vllm.engine import VLLMEngine
    from arft.models.loading import load_tokenizer, resolve_model_dir

    if is_run_dir(target):
        return _run_models(Path(target), name=name, base=base, engine=engine, max_tokens=max_tokens,
                           constrain=constrain, on_status=on_status)
    spec = engine_as(engine or TransformersEngineSpec(), "vllm")
    tokenizer = load_tokenizer(target)
    work = Path(tempfile.mkdtemp(prefix="arft-serve-vllm-"))
    on_status(f"starting a vLLM server on {target} (log: {work / 'vllm.log'})")
    eng = VLLMEngine.launch(spec, resolve_model_dir(target), work / "vllm.log", tokenizer,
                            max_model_len=spec.max_model_len or 4096, on_status=on_status)
    return [served(name or target, eng, ChatFormat(tokenizer), max_tokens, constrain)]


def _run_models(run: Path, *, name: str | None, base: bool, engine: TransformersEngineSpec | None, max_tokens: int,
                constrain: bool | None, on_status: Callable[[str], None]) -> list[ServedModel]:
    """A run directory's tuned agent (and its base) over one vLLM server."""
    from arft.app.serve.fingerprint import checkpoint_stamp
    from arft.app.serve.models import served, tuned_name_of
    from arft.engines.vllm.server import SERVED_NAME
    from arft.trainer.merge import run_job

    job = run_job(run)
    spec = engine_as(engine or job.engine, "vllm")
    tuned_name = tuned_name_of(str(run), name, job.model, base)
    option = job.rollout.constrained_tool_calls if constrain is None else constrain
    work = run / "serve-vllm"
    if job.training.finetune == "full":
        if base:
            raise ServeError(f"{run} is a full fine-tune: with --engine vllm its base would need a second "
                             "server; add --no-base (or serve the base with another `arft serve`)")
        eng, tokenizer = _merged_server(run, job, spec, work, on_status)
    else:
        eng, tokenizer = _adapter_server(run, job, spec, work, tuned_name, on_status)
    eng.policy = checkpoint_stamp(run)  # the tuned model's answers name its checkpoint (fingerprint)
    fmt = ChatFormat(tokenizer, worked_example=job.rollout.worked_example)
    models = [served(tuned_name, eng, fmt, max_tokens, option)]
    if base:
        models.append(served(job.model, eng.named(SERVED_NAME), fmt, max_tokens, option))
    return models


def _merged_server(run: Path, job: JobSpec, spec: VLLMEngineSpec, work: Path, on_status: Callable[[str], None]
                   ) -> tuple[Any, Any]:
    """A server on the run's merged weights (bf16, ``work/weights``)."""
    from arft.engines.vllm.engine import VLLMEngine
    from arft.engines.vllm.server import save_vllm_dir
    from arft.trainer.merge import tuned_model

    on_status(f"merging the checkpoint of {run} into {work / 'weights'}")
    _, model, tokenizer = tuned_model(run)
    folder = save_vllm_dir(model, tokenizer, work / "weights")
    del model
    on_status(f"starting a vLLM server (log: {work / 'vllm.log'})")
    eng = VLLMEngine.launch(spec, str(folder), work / "vllm.log", tokenizer,
                            max_model_len=job.rollout.max_tokens, on_status=on_status)
    return eng, tokenizer


def _adapter_server(run: Path, job: JobSpec, spec: VLLMEngineSpec, work: Path, tuned_name: str,
                    on_status: Callable[[str], None]) -> tuple[Any, Any]:
    """A server on the base weights with the run's adapter (``work/adapter``) loaded as ``tuned_name``."""
    from arft.engines.vllm.engine import VLLMEngine
    from arft.models.loading import resolve_model_dir
    from arft.trainer.merge import tuned_policy

    on_status(f"writing the adapter of {run} to {work / 'adapter'}")
    _, policy, tokenizer = tuned_policy(run)
    policy.save_pretrained(work / "adapter")
    del policy
    on_status(f"starting a vLLM server (log: {work / 'vllm.log'})")
    eng = VLLMEngine.launch(spec, resolve_model_dir(job.model_ref), work / "vllm.log", tokenizer,
                            max_model_len=job.rollout.max_tokens, lora_rank=job.training.lora.r,
                            on_status=on_status)
    try:
        eng.load_adapter(tuned_name, work / "adapter")
    except BaseException:
        assert eng.server is not None
        eng.server.stop()
        raise
    eng.model = tuned_name
    return eng, tokenizer
