"""The job's ``engine`` section: a discriminated union on ``type``, one model per engine.

Each engine type has only the options that apply to it, so ``engine: {type: vllm,
max_batch_size: 8}`` is a load error naming the file, the line and the engine type, as a
misspelt grader option is (``arft.config.loading`` walks this union as it walks the graders').
An engine section without ``type`` is the transformers engine (``with_engine_type``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union, overload

from pydantic import Field

from arft.config.base import Spec


class LocalModelSpec(Spec):
    """What every engine over a model arft loads itself shares (transformers, vLLM)."""

    dtype: Literal["auto", "bfloat16", "float32", "float16"] = "auto"
    """Weights and compute dtype. auto: bfloat16 where bf16 is fast (GPUs, CPUs with native
    bf16, measured at start), else float32 (a vLLM server: bfloat16). Full fine-tuning always
    trains in float32."""
    device: str = "auto"
    """A torch device (``cpu``, ``cuda``, ``cuda:1``). auto: cuda when available, else cpu."""


class TransformersEngineSpec(LocalModelSpec):
    """``type: transformers`` (the default): the job's model in this process (CPU or GPU),
    trainable."""

    type: Literal["transformers"] = "transformers"
    """The engine: the job's model in this process, batched, trainable."""
    max_batch_size: int = 32
    """Most concurrent requests the engine puts in one forward pass."""
    prefix_cache_mb: float = Field(2048, ge=0)
    """Memory (MB) for keys and values kept between requests, so a rollout's next turn prefills
    only its new tokens and the samples of a task share their prompt's prefill. Least recently
    used prefixes are evicted first; 0 turns KV reuse off. About 46 KB a token for the embedded
    model in float32, half in bfloat16."""
    packed_linears: bool = True
    """On the CPU: decode steps and short prefills run the linear layers on oneDNN with weights
    packed once into its blocked layout, which suits the small matmuls of decode steps (repacked
    after each weight update; figures in docs/benchmarks.md), at the cost of one more copy of the
    linear weights in memory (~0.5 GB for the embedded model in float32). false keeps
    ``F.linear``."""
    fused_pass: bool = True
    """On the CPU: decode steps and prefills of Llama-family models (plain LoRA adapters
    included) run arft's own forward pass (stacked packed products, cascade attention that
    skips holes, no padding run) instead of Hugging Face's, with the same logits within float
    rounding; needs ``packed_linears``. false: Hugging Face's forward (for comparisons, e.g.
    ``python -m bench run demo_pools --compare fused``; figures in docs/benchmarks.md)."""
    cpu_kernels: bool = True
    """On the CPU, with ``fused_pass``: arft's own kernels (C++ with AVX-512, built with the
    system's C++ compiler, ``$CXX`` or ``c++``, into ``~/.cache/arft/kernels``) run decode
    steps' attention over the rows' keys and values, and RMSNorm, the rotary embedding and
    ``silu(gate) * up`` in one call each (Hugging Face's results); on AVX2 CPUs without
    AVX-512, float32 attention only. Where they cannot run (neither, no compiler) the engine
    logs why and keeps PyTorch's. false: PyTorch's (for comparisons)."""
    lora: Literal["auto", "merged", "adapter"] = "auto"
    """LoRA training: how rollouts apply the adapter. ``adapter``: the engine samples from the
    policy itself (in its fused pass on the CPU, the adapters' products packed beside the base
    layers'; elsewhere peft's two extra small matmuls, dropout, scale and sum per layer);
    ``merged``: from its own copy of the model whose weights are base + adapter, merged again
    after every update (one product per layer instead of three on the CPU, one more copy of the
    weights; in bfloat16 the adapter's smallest changes round away; figures in
    docs/benchmarks.md). auto: merged for float32 weights on
    the CPU, else adapter (``arft.engines.factory`` decides)."""


class VLLMEngineSpec(LocalModelSpec):
    """``type: vllm``: a vLLM server arft starts (or ``base_url``), token ids in and out,
    trainable (the weights are synced after every update)."""

    type: Literal["vllm"]
    """The engine: a vLLM server."""
    base_url: str | None = None
    """A vLLM server already running, e.g. http://127.0.0.1:8000 (default: arft starts one)."""
    vllm_python: str | None = None
    """The python of the environment vLLM is installed in (vLLM pins its own transformers).
    Default: this python when it can import vllm, else ``.venv-vllm/bin/python`` (what
    ``make setup-vllm`` makes)."""
    sync: Literal["auto", "lora", "merged"] = "auto"
    """How trained weights reach the server after each update. ``lora``: the adapter is loaded
    under a new name (``step-N``); ``merged``: base + adapter written as bf16 safetensors and
    reloaded in place. auto: lora on GPUs, merged on CPUs (LoRA kernels cost more there)."""
    kv_cache_gb: float = Field(2.0, gt=0)
    """On CPUs: memory for the KV cache (``VLLM_CPU_KVCACHE_SPACE``)."""
    max_model_len: int | None = None
    """The server's context length (default: ``rollout.max_tokens``)."""
    startup_timeout_s: float = 600.0
    """How long to wait for the server's ``/health``."""


class OpenAIEngineSpec(Spec):
    """``type: openai``: an OpenAI-compatible server (evaluation only: it returns no token ids)."""

    type: Literal["openai"]
    """The engine: an OpenAI-compatible chat-completions server."""
    base_url: str | None = None
    """The server, e.g. http://127.0.0.1:8000/v1 (default: $OPENAI_BASE_URL)."""
    api_key_env: str = "OPENAI_API_KEY"
    """The environment variable holding the API key (may be unset for local servers)."""
    api_key: str | None = None
    """The API key as a ``${ENV_VAR}`` reference, resolved at start (a literal key works too and
    is stored as ``***``); wins over ``api_key_env``."""
    served_model: str | None = None
    """The model name to send (default: the job's ``model``)."""
    timeout_s: float = 120.0
    """Seconds one request may take before it is retried."""


EngineSpec = Annotated[Union[TransformersEngineSpec, VLLMEngineSpec, OpenAIEngineSpec],
                       Field(discriminator="type")]
"""Which engine generates, told apart by ``type``: each type has only its own options, so an
option of another engine is an error naming its line. ``transformers`` is trainable, ``vllm``
too, ``openai`` is for evaluation only."""

EngineType = Literal["transformers", "vllm", "openai"]
"""The ``type`` of each engine spec."""


def local_model(spec: Spec) -> LocalModelSpec:
    """The dtype and device of a model arft loads for the job (the policy it trains): the
    engine's own, or the defaults under an engine that loads none (``openai``)."""
    return spec if isinstance(spec, LocalModelSpec) else LocalModelSpec()


def with_engine_type(raw: Any) -> Any:
    """An engine section without ``type`` is the transformers engine (the default)."""
    if isinstance(raw, dict) and "type" not in raw:
        return {"type": "transformers", **raw}
    return raw


def its_own_options(raw: Any) -> Any:
    """A stored engine section with only the options of its own ``type``: a run recorded before
    each engine type had its own spec holds every engine's options (their defaults), and must
    still load (``JobSpec.from_stored``)."""
    if not isinstance(raw, dict):
        return raw
    raw = with_engine_type(raw)
    specs: dict[str, type[Spec]] = {"transformers": TransformersEngineSpec, "vllm": VLLMEngineSpec,
                                    "openai": OpenAIEngineSpec}
    spec = specs.get(raw["type"])
    return raw if spec is None else {k: v for k, v in raw.items() if k in spec.model_fields}


@overload
def engine_as(spec: Spec, engine_type: Literal["transformers"]) -> TransformersEngineSpec: ...


@overload
def engine_as(spec: Spec, engine_type: Literal["vllm"]) -> VLLMEngineSpec: ...


@overload
def engine_as(spec: Spec, engine_type: Literal["openai"]) -> OpenAIEngineSpec: ...


def engine_as(spec: Spec, engine_type: EngineType) -> Spec:
    """``spec`` as the spec of ``engine_type``, keeping the options both have (dtype, device) and
    the defaults for the rest: a run trained with vLLM served by the transformers engine."""
    specs: dict[str, type[Spec]] = {"transformers": TransformersEngineSpec, "vllm": VLLMEngineSpec,
                                    "openai": OpenAIEngineSpec}
    target = specs[engine_type]
    shared = {k: v for k, v in spec.model_dump(exclude_unset=True).items()
              if k in target.model_fields and k != "type"}
    return target.model_validate({**shared, "type": engine_type})
