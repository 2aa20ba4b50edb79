"""A trainable ``TokenEngine`` over a vLLM server: token ids in, sampled token ids + logprobs out.

Each ``generate`` is one ``POST /v1/completions`` whose ``prompt`` is the rollout's own token ids
(extended turn by turn, never decoded and re-tokenized) and whose answer carries the sampled ids
(``return_token_ids``) and their logprobs. The server runs with ``--logprobs-mode
processed_logprobs``, so a logprob is that of the distribution the token was sampled from: after
temperature and after the grammar mask (the honest logprob of constrained calls, as the
transformers engine records it). vLLM's prefix cache makes a rollout's next turn prefill only its
new tokens; every turn of a rollout goes to this one server (session affinity by construction).

Unconstrained turns stop as in the transformers engine: a stop string ends the completion after
the token that completes it (vLLM returns every sampled token through the match), and
``stop_unless_followed_by`` is a short look-ahead request after the stop: when it starts with a
continuation string (another ``<tool_call>``) the completion goes on, else the look-ahead is
dropped. A constrained turn is one vLLM structured output, ``turn_tag``: free text, then calls
(separated by newlines; one only without parallel calls), then the end of the turn, so that no
stop string is needed (one would also fire inside an argument). The tokens vLLM sampled are
replayed through the same grammar here, which marks the constrained positions and checks that
both sides enforced the same grammar. vLLM does not write forced text without sampling
(the transformers engine's jump-forward), so a small model's constrained calls are weaker there.

Weights: ``sync(policy, step)`` after every update. ``lora`` saves the adapter and loads it under
the versioned name ``step-N`` (the next requests name it; older ones are unloaded once no request
under way can name them); ``merged`` writes the base weights plus the LoRA delta (or the full
weights) as bf16 safetensors and reloads them in place. Both reset the prefix cache, preempting
requests under way (async rollouts) so that they recompute their keys and values: no request
reuses keys and values of old weights. Each sync stamps the engine with the step and the hash of
the tensors it saved from (``PolicyStamp``); every generation carries that stamp.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import httpx

from arft.engines.base import EngineError, Generation, SamplingParams
from arft.engines.call_closing import CallCloser
from arft.engines.grammar import ToolCallMasker, turn_tag
from arft.models.hf_model import merged_copy
from arft.models.weights_hash import policy_hash
from arft.records import PolicyStamp
from arft.http import json_client
from arft.seeds import look_ahead_seed
from arft.engines.vllm.server import SERVED_NAME, ServerOptions, VLLMServer, vllm_python
from arft.chat.constraints import Grammar, JsonGrammar, ToolGrammar, with_search_patterns

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from arft.config import JobSpec, VLLMEngineSpec

LOOK_AHEAD_TOKENS = 8
"""Tokens sampled after a stop to see whether a continuation string follows (as the transformers engine)."""


class VLLMEngine:
    """``TokenEngine`` over a vLLM OpenAI-compatible server at ``base_url``.

    ``server``: the process arft started (stopped by ``aclose``); None when attached to a server
    someone else runs. ``sync``: ``lora`` or ``merged`` (see the module docstring).
    """

    supports_constraints = True

    def __init__(self, base_url: str, tokenizer: "PreTrainedTokenizerBase", *, server: VLLMServer | None = None,
                 sync: str = "merged", weights_dir: Path | None = None, timeout_s: float = 600,
                 keep_adapters: int = 1) -> None:
        self.base_url = base_url.rstrip("/")
        self.tokenizer = tokenizer
        self.server = server
        self.sync_mode = sync
        self.weights_dir = weights_dir
        self.model = SERVED_NAME
        """The name requests use: the base, or the adapter of the last ``sync``."""
        self.keep_adapters = keep_adapters
        """Adapters kept loaded: the newest, and with async rollouts those that requests still
        under way may name (``training.max_off_policy_steps`` + 1)."""
        self._adapters: list[str] = []
        self.policy: PolicyStamp | None = None
        """The stamp of the weights the last ``sync`` told the server to load (the step and the hash
        arft computed over the tensors it saved from); every generation carries it."""
        self.masker = ToolCallMasker(tokenizer, len(tokenizer), [tokenizer.eos_token_id])
        self.closer = CallCloser(tokenizer, len(tokenizer), [tokenizer.eos_token_id])
        """Closes a call the server cut at ``max_new_tokens`` (see ``_close_cut_call``)."""
        self._client = json_client(timeout_s)  # one pooled client per event loop
        self.stats = {"requests": 0, "prompt_tokens": 0, "cached_tokens": 0, "generated_tokens": 0}

    @classmethod
    def from_job(cls, job: JobSpec, run_dir: Path, tokenizer: "PreTrainedTokenizerBase | None" = None,
                 on_status: Callable[[str], None] = lambda s: None) -> "VLLMEngine":
        """Start the job's server (output in ``run_dir/vllm.log``; synced weights in
        ``run_dir/vllm-weights``), or attach to ``engine.base_url``."""
        from arft.models.loading import load_tokenizer, pick_device, resolve_model_dir

        spec = job.engine
        assert spec.type == "vllm", "a vLLM engine is built for a job whose engine is vllm"
        tokenizer = tokenizer if tokenizer is not None else load_tokenizer(job.model_ref)
        cpu = pick_device(spec.device) == "cpu"
        sync = spec.sync if spec.sync != "auto" else ("merged" if cpu or job.training.finetune == "full" else "lora")
        weights = run_dir / "vllm-weights"
        keep = job.training.max_off_policy_steps + 1
        if spec.base_url:
            return cls(spec.base_url, tokenizer, sync=sync, weights_dir=weights, keep_adapters=keep)
        return cls.launch(spec, resolve_model_dir(job.model_ref), run_dir / "vllm.log", tokenizer,
                          max_model_len=job.rollout.max_tokens,
                          lora_rank=job.training.lora.r if sync == "lora" else None, max_loras=keep + 1,
                          on_status=on_status, sync=sync, weights_dir=weights, keep_adapters=keep)

    @classmethod
    def launch(cls, spec: VLLMEngineSpec, model_dir: str, log: Path, tokenizer: "PreTrainedTokenizerBase", *,
               max_model_len: int,
               lora_rank: int | None = None, max_loras: int = 2,
               on_status: Callable[[str], None] = lambda s: None, **engine: Any) -> "VLLMEngine":
        """Start a server on ``model_dir`` sized by ``spec`` (``engine.max_model_len`` or
        ``max_model_len``; runtime LoRA adapters up to ``lora_rank``), its output in ``log``;
        ``engine``: this class's keyword arguments."""
        from arft.models.loading import pick_device

        options = ServerOptions(
            model_dir=model_dir, dtype="bfloat16" if spec.dtype == "auto" else spec.dtype,
            max_model_len=spec.max_model_len or max_model_len, kv_cache_gb=spec.kv_cache_gb,
            max_lora_rank=lora_rank, max_loras=max_loras, cpu=pick_device(spec.device) == "cpu")
        server = VLLMServer.start(options, vllm_python(spec.vllm_python), log, spec.startup_timeout_s, on_status)
        return cls(server.base_url, tokenizer, server=server, **engine)

    def named(self, model: str) -> "VLLMEngine":
        """An engine on the same server whose requests name ``model`` (an adapter loaded with
        ``load_adapter``, or the base); it does not own the server."""
        other = VLLMEngine(self.base_url, self.tokenizer)
        other.model = model
        return other

    def load_adapter(self, name: str, path: Path) -> None:
        """Load the peft adapter folder ``path`` into the server under ``name`` (blocking: from
        a coroutine, run it in a thread)."""
        r = httpx.post(f"{self.base_url}/v1/load_lora_adapter", timeout=120,
                       json={"lora_name": name, "lora_path": str(path.resolve())})
        self._check(r, "/v1/load_lora_adapter")

    def check_grammar(self, grammar: Grammar) -> None:
        """Compile ``grammar`` here with xgrammar (what vLLM uses) so that a schema it cannot
        enforce fails before the first rollout (``ConstraintError``)."""
        self.masker.compile(grammar)

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        """One completion; without a grammar, a look-ahead request after a stop with continuation
        strings (a constrained turn's grammar itself ends the turn after its calls)."""
        prompt, grammar = list(prompt_ids), params.grammar
        compiled = None
        if isinstance(grammar, ToolGrammar):  # parallel calls: the look-ahead is asked for
            tag = turn_tag(grammar, parallel=bool(params.stop_unless_followed_by))
            compiled = self.masker.compile_tag(tag)
            outputs: dict[str, Any] | None = {"structural_tag": json.dumps(tag)}
            # a stop string at a call's close would also fire inside an argument: the grammar ends the turn
            stops = [s for s in params.stop if s not in grammar.call_end]
        elif isinstance(grammar, JsonGrammar):
            compiled, outputs, stops = self.masker.compile(grammar), json_outputs(grammar), list(params.stop)
        else:
            outputs, stops = None, list(params.stop)
        ids, lps, finish, stop = await self._complete(prompt, params, params.max_new_tokens, outputs, stops)
        follow = list(params.stop_unless_followed_by) if grammar is None else []
        while finish == "stop" and stop is not None and follow and len(ids) < params.max_new_tokens:
            ahead, ahead_lps, _, matched = await self._complete(
                prompt + ids, params, min(LOOK_AHEAD_TOKENS, params.max_new_tokens - len(ids)), None, follow)
            opened = str(self.tokenizer.decode(ahead, skip_special_tokens=False)).lstrip()
            if matched is None or not any(opened.startswith(f) for f in follow):
                break  # nothing follows: the completion ends at the stop, the look-ahead is dropped
            rest, rest_lps, finish, stop = await self._complete(
                prompt + ids + ahead, params, params.max_new_tokens - len(ids) - len(ahead), None, stops)
            ids, lps = ids + ahead + rest, lps + ahead_lps + rest_lps
        reason = "length" if finish == "length" else ("stop" if stop is not None else "eos")
        closed = 0
        if isinstance(grammar, ToolGrammar):
            ids, lps, reason = self._end_at_last_call(grammar, ids, lps, reason)
            if reason == "length" and compiled is not None and self.closer.enabled:
                ids, lps, reason, closed = self._close_cut_call(compiled, ids, lps, params.max_new_tokens)
        constrained = self.masker.limited_positions(compiled, ids) if compiled is not None else ()
        return Generation(token_ids=tuple(ids), logprobs=tuple(lps), finish_reason=reason,
                          text=self.tokenizer.decode(ids, skip_special_tokens=False),
                          constrained=tuple(constrained), policy=self.policy, closed_calls=closed)

    def _close_cut_call(self, compiled: Any, ids: list[int], lps: list[float],
                        max_new_tokens: int) -> tuple[list[int], list[float], str, int]:
        """A turn the server cut inside a call, closed as the transformers engine closes it: the
        sampled tokens up to where its rule starts closing, then the call's shortest completion
        (logprob 0; ``arft.engines.call_closing``), ending the turn with ``stop``."""
        tail = self.closer.close_replayed(self.masker.matcher(compiled), ids, max_new_tokens)
        if tail is None:
            return ids, lps, "length", 0
        return ids[:tail.at] + tail.tokens, lps[:tail.at] + [0.0] * len(tail.tokens), "stop", 1

    def _end_at_last_call(self, grammar: ToolGrammar, ids: list[int], lps: list[float],
                          reason: str) -> tuple[list[int], list[float], str]:
        """Drop what the turn wrote after its last call's close (text that opened no call, and
        the end of the turn), as the transformers engine stops there: the turn then ends with
        ``stop`` at the close."""
        text = grammar.prefill + str(self.tokenizer.decode(ids, skip_special_tokens=False))
        close = text.rfind(grammar.call_end)
        if close < 0 or reason == "length" and text.rfind(grammar.trigger) > close:
            return ids, lps, reason  # no call, or the last one was cut off: nothing to drop
        want = close + len(grammar.call_end) - len(grammar.prefill)
        for k in range(1, len(ids) + 1):
            if len(self.tokenizer.decode(ids[:k], skip_special_tokens=False)) >= want:
                return ids[:k], lps[:k], "stop" if k < len(ids) or reason != "length" else reason
        return ids, lps, reason

    async def _complete(self, prompt: list[int], params: SamplingParams, max_tokens: int,
                        outputs: dict[str, object] | None, stops: list[str]
                        ) -> tuple[list[int], list[float], str, Any]:
        """(ids, logprobs, finish_reason, stop_reason) of one ``/v1/completions`` request
        (``outputs``: vLLM's ``structured_outputs``)."""
        body: dict[str, Any] = {
            "model": self.model, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k or -1,
            "logprobs": 0, "return_token_ids": True, "return_tokens_as_token_ids": True,
            "skip_special_tokens": False, "include_stop_str_in_output": True}
        if params.seed is not None:
            body["seed"] = look_ahead_seed(params.seed, len(prompt))  # a look-ahead draws its own stream
        if stops:
            body["stop"] = stops
        if outputs is not None:
            body["structured_outputs"] = outputs
        try:
            r = await self._client.get().post(f"{self.base_url}/v1/completions", json=body)
        except httpx.HTTPError as e:
            raise EngineError(f"the vLLM server at {self.base_url} did not answer ({type(e).__name__}: "
                              f"{e}){self._log_hint()}") from e
        if r.status_code != 200:
            raise EngineError(f"the vLLM server answered {r.status_code}: {r.text[:400]}{self._log_hint()}")
        data = r.json()
        choice, usage = data["choices"][0], data.get("usage") or {}
        ids = [int(t) for t in choice["token_ids"]]
        self.stats["requests"] += 1
        self.stats["prompt_tokens"] += len(prompt)
        self.stats["cached_tokens"] += (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        self.stats["generated_tokens"] += len(ids)
        lps = [float(x) for x in choice["logprobs"]["token_logprobs"]]
        return ids, lps, str(choice["finish_reason"]), choice.get("stop_reason")

    def _log_hint(self) -> str:
        return f"; server log: {self.server.log}" if self.server is not None else ""

    async def reset_prefix_cache(self) -> None:
        """Drop every cached key and value; requests under way (async rollouts) are preempted
        and recompute theirs with the current weights."""
        answer = await self._post("/reset_prefix_cache?reset_running_requests=true", None)
        if isinstance(answer, dict) and answer.get("success") is False:
            raise EngineError("vLLM could not reset its prefix cache after a weight sync (blocks still "
                              f"held), so later requests could reuse old weights' keys{self._log_hint()}")

    async def _post(self, path: str, payload: object) -> Any:
        r = await self._client.get().post(f"{self.base_url}{path}", json=payload)
        self._check(r, path)
        try:
            return r.json() if r.content else None
        except ValueError:  # some routes answer plain text ("Success: LoRA adapter ... added")
            return r.text

    def _check(self, r: httpx.Response, path: str) -> None:
        if r.status_code != 200:
            raise EngineError(f"vLLM {path} answered {r.status_code}: {r.text[:400]}{self._log_hint()}")

    async def policy_stamp(self) -> PolicyStamp | None:
        """The stamp of the weights the server was last told to load (``policy``)."""
        return self.policy

    async def sync(self, policy: Any, step: int) -> float:
        """Make the server sample from ``policy``'s current weights (see the module docstring) and
        stamp them (``policy``); returns the seconds it took."""
        import time

        start = time.perf_counter()
        if self.weights_dir is None:
            raise EngineError("this vLLM engine has no folder for weights: build it with weights_dir")
        hashed = asyncio.ensure_future(asyncio.to_thread(policy_hash, policy))  # beside the save
        if self.sync_mode == "lora":
            path = self.weights_dir / f"step-{step}"
            await asyncio.to_thread(policy.save_pretrained, path)  # rollouts under way go on meanwhile
            name = f"step-{step}"
            await asyncio.to_thread(self.load_adapter, name, path)
            self.model = name
            self._adapters.append(name)
            while len(self._adapters) > self.keep_adapters:  # none of the requests under way names it
                await self._post("/v1/unload_lora_adapter", {"lora_name": self._adapters.pop(0)})
        else:
            from arft.engines.vllm.server import save_vllm_dir

            merged_dir = self.weights_dir / "merged"
            folder = await asyncio.to_thread(lambda: save_vllm_dir(merged_copy(policy), self.tokenizer, merged_dir))
            await self._post("/collective_rpc", {"method": "reload_weights",
                                                 "kwargs": {"weights_path": str(folder.resolve())}})
        await self.reset_prefix_cache()
        self.policy = PolicyStamp(version=step, hash=await hashed)
        return time.perf_counter() - start

    async def aclose(self) -> None:
        await self._client.aclose()
        if self.server is not None:
            self.server.stop()


def json_outputs(grammar: JsonGrammar) -> dict[str, Any]:
    """vLLM's ``structured_outputs`` for a whole-reply JSON grammar."""
    if grammar.json_schema is None:
        return {"json_object": True}
    return {"json": with_search_patterns(grammar.json_schema)}
