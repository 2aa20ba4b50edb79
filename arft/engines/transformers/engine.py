"""The trainable engine: a Hugging Face causal LM served with continuous batching.

Many rollouts call ``await engine.generate(prompt_ids, params)`` at once. Each call puts a request in
an inbox; a background batcher task runs the decode loop in a worker thread (``arft.cpu.threads``:
one OpenMP pool alive) so the event loop keeps running the tools of other rollouts meanwhile.

The decode loop keeps one left-padded batch with its KV cache. Before every decode step it admits
waiting requests (up to ``max_batch_size`` rows): they are prefilled together (in the pass of the
running rows' decode step where ``ModelPass.step_and_prefill`` can) and merged into the batch.
Requests with different ``SamplingParams`` share a batch (per-row temperature, top-p, top-k, stop
strings). A finished row leaves at once, so a long row never makes short ones wait.

Seeds: a request with ``seed`` draws from its own ``torch.Generator`` seeded with it, so the same
prompt, params and seed give the same tokens whatever else shares the batch (up to floating-point
differences between batch shapes, which can flip a near tie); the others share the engine's. A
seeded prompt's first token always comes from its last token run alone over the stored rest
(``prefill.seeded_heads``), so the first request of a prompt samples what its repeats sample.

Constrained tool calls: a request whose ``SamplingParams.grammar`` is set gets a grammar matcher
(``arft.engines.grammar``); before each of its tokens is sampled, the logits of tokens the grammar
does not allow are set to ``-inf``, so the sampled token and its recorded logprob come from the
masked, renormalised distribution. Where the grammar allows one text only (a call's key path, its
close), its next token is written without sampling, with logprob 0 (the whole mass); so is the
grammar's shortest completion of a call that ``max_new_tokens`` would otherwise cut
(``arft.engines.call_closing``). A stop string
inside a call's arguments is content, not a stop. Grammars are compiled once per toolset, on the
caller's side, so a schema that cannot be compiled fails that request only (``ConstraintError``).

KV reuse: the keys and values of every finished request (prompt and completion) go to a prefix
store (``arft.engines.transformers.prefix_cache``, bounded by ``prefix_cache_mb``, least recently used evicted
first). A new request prefills only what follows the longest prefix the store already has, so a
rollout's next turn runs just its tool results; the K samples of a task run their shared prompt
once, and a prefix common to all prompts of an admission (a system prompt, worked examples) is
run once before them (``arft.engines.transformers.prefill``). The store is cleared whenever a weight changes.
Decode steps read that common prefix once for all rows (``arft.cpu.cascade``, on the CPU), and
run the linear layers on oneDNN with prepacked weights (``packed_linear``), in a forward pass of their
own for Llama-family models (``fused_pass``; see ``model_pass``). Rows' decoding state and finish
rules: ``arft.engines.transformers.decode_rows``; the KV cache: ``kv_batch``.

The model is used as is (no copy): a trainer may update its weights in place between calls, or while
requests run through ``write_weights``, which waits for the pass under way (``snapshot`` samples from
its own copy of a policy that way). torch and transformers are imported lazily.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from arft.chat.constraints import Grammar, ToolGrammar
from arft.config import JobError
from arft.cpu import cascade, packed_linear
from arft.cpu import threads as cpu_threads
from arft.engines.base import EngineError, GenerateCall, Generation, SamplingParams
from arft.engines.call_closing import CallCloser, RowBudget
from arft.engines.factory import transformers_options
from arft.engines.grammar import ToolCallMasker
from arft.engines.transformers.decode_rows import FinishRules, Request, Row, checked_prompt, generation, new_row
from arft.engines.transformers.kv_batch import KVBatch, PassInputs, growing_layer
from arft.engines.transformers.model_pass import ModelPass
from arft.engines.transformers.prefill import PrefillPlan, distinct, plan, seeded_heads, shared_prefix
from arft.engines.transformers.prefix_cache import MB, PrefixCache
from arft.engines.transformers.sampling import sample_rows
from arft.models.hf_model import eos_ids, torch_device, weights_fingerprint
from arft.records import PolicyStamp

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    import torch

    from arft.config import EngineSpec


@dataclass
class EngineStats:
    """What the engine has done so far (written by the worker thread; read for monitoring)."""

    requests: int = 0
    """Requests answered (with a generation or an error)."""
    generated_tokens: int = 0
    prefills: int = 0
    """Prefill forward passes (each admits one or more requests)."""
    decode_steps: int = 0
    """Decode forward passes (one token for every row in the batch)."""
    steps_in_prefills: int = 0
    """Decode steps run in a prefill's forward pass (their rows ride along its products)."""
    max_rows: int = 0
    """Most rows decoded together in one forward pass."""
    cascade_steps: int = 0
    """Decode steps that read the rows' common prefix once for all of them (cascade attention)."""
    decode_batch_sizes: collections.Counter[int] = field(default_factory=collections.Counter)
    """How many decode steps ran with each batch size."""
    prefill_batch_sizes: collections.Counter[int] = field(default_factory=collections.Counter)
    constrained_tokens: int = 0
    """Tokens sampled under a grammar mask that excluded at least one token."""
    closed_calls: int = 0
    """Constrained calls closed by the grammar's shortest completion because the completion's
    ``max_new_tokens`` was about to run out (``arft.engines.call_closing``)."""
    cut_calls: int = 0
    """Completions that still ended by length inside a constrained call (no completion fitted)."""
    dropped_calls: int = 0
    """Further calls opened after a call's close with too little room for their shortest form,
    dropped with the look-ahead (the turn ends at the previous call's close)."""
    prompt_tokens: int = 0
    """Prompt tokens of the requests admitted."""
    prefill_tokens: int = 0
    """Prompt tokens actually run by prefill forward passes (the rest came from the prefix store
    or from a duplicate prompt admitted together)."""


class TransformersEngine:
    """A ``TokenEngine`` over a Hugging Face causal LM with continuous batching (and constrained
    tool calls: ``supports_constraints``).

    ``device`` defaults to the device of the model's input embeddings; the model must already be
    there (it is never moved or copied). Generation uses the model in whatever mode it is in: keep
    it in eval mode (``load_model`` does) so dropout does not change the policy. ``stats`` counts
    prefills, decode steps and batch sizes; ``prefix_cache.stats`` what the prefix store reused.
    ``prefix_cache_mb=0`` turns KV reuse off; ``cascade_attention=False`` runs Hugging Face's sdpa
    as it is (``arft.cpu.cascade``), ``fused_pass=False`` its forward for decode steps and
    prefills (``fused_pass``; both for comparisons); ``packed_linears``, ``cpu_kernels``: ``engine.*``."""

    supports_constraints = True

    def check_grammar(self, grammar: Grammar) -> None:
        """Compile ``grammar`` now (it is cached for the requests that use it), so a schema the
        constraint cannot enforce fails before any rollout (``ConstraintError``)."""
        self.masker.compile(grammar)

    def __init__(self, model: Any, tokenizer: "PreTrainedTokenizerBase", max_batch_size: int = 32,
                 device: str | None = None, prefix_cache_mb: float = 2048, cascade_attention: bool = True,
                 packed_linears: bool = True, fused_pass: bool = True, cpu_kernels: bool = True) -> None:
        if max_batch_size < 1:
            raise JobError(f"max_batch_size must be >= 1 (got {max_batch_size}); set engine.max_batch_size")
        if prefix_cache_mb < 0:
            raise JobError(f"prefix_cache_mb must be >= 0 (got {prefix_cache_mb}); set "
                           "engine.prefix_cache_mb (0 turns KV reuse off)")
        self.model, self.tokenizer = model, tokenizer
        self.max_batch_size = max_batch_size
        embeddings = model.get_input_embeddings()
        self.device = embeddings.weight.device if device is None else torch_device(device)
        self.vocab_size = int(embeddings.num_embeddings)
        self.eos_ids = eos_ids(model, tokenizer)
        self.stats = EngineStats()
        self.prefix_cache = PrefixCache(int(prefix_cache_mb * MB))
        """Keys and values of finished requests, reused by later prompts that share a prefix."""
        self.masker = ToolCallMasker(tokenizer, self.vocab_size, self.eos_ids)
        """Compiles tool-call grammars (cached per toolset) and masks logits with them."""
        self.closer = CallCloser(tokenizer, self.vocab_size, self.eos_ids)
        """Closes an open call by its shortest completion before the budget runs out
        (``closer.enabled = False`` lets calls be cut, for comparisons)."""
        self._finish_rules = FinishRules(tokenizer, self.eos_ids, self.masker, self.closer)
        on_cpu = self.device.type == "cpu"
        self._pass = ModelPass(model, on_cpu, cascade_attention, packed_linears, fused_pass, cpu_kernels)
        self._inbox: collections.deque[Request] = collections.deque()
        self._lock = threading.Lock()
        self._weights_lock = threading.Lock()
        """Held by the worker during each forward pass and by ``write_weights``."""
        self._weights_free = threading.Event()
        """Cleared while a ``write_weights`` waits, so the worker lets it in before its next pass."""
        self._weights_free.set()
        self._stop = threading.Event()
        self._rng: "torch.Generator | None" = None
        self._wakeup: asyncio.Event | None = None
        self._batcher: asyncio.Task[None] | None = None
        self._thread = cpu_threads.WorkerThread("arft-engine")
        self._closed = False
        self.policy: PolicyStamp | None = None
        """The weights it samples from, stamped on every generation: set by the sync that wrote
        them (``SnapshotEngine``), by the trainer for an engine sharing its policy, or by
        ``arft serve`` for the checkpoint it loaded."""

    async def policy_stamp(self) -> PolicyStamp | None:
        """``policy``: the stamp of the weights the next pass samples from."""
        return self.policy

    @classmethod
    def from_spec(cls, model_name: str, spec: "EngineSpec") -> "TransformersEngine":
        """Load ``model_name`` (see ``arft.models.loading.load_model``) with the spec's settings."""
        from arft.models.loading import load_model

        if spec.type != "transformers":
            raise ValueError(f"engine.type is '{spec.type}': use its engine class, or set engine.type: transformers")
        model, tokenizer = load_model(model_name, dtype=spec.dtype, device=spec.device)
        return cls(model, tokenizer, **transformers_options(spec))

    def clear_prefix_cache(self) -> None:
        """Forget stored prefixes and packed weights, and check the forward paths again: call it
        after a peft adapter switch, merge or injection."""
        self.prefix_cache.clear()
        packed_linear.forget(self.model)
        self._pass.refresh()

    def write_weights(self, write: Callable[[Any], None]) -> None:
        """Call ``write(model)`` between two forward passes (from any thread but the worker's; it
        blocks until the pass under way ends). Rows go on with the new weights; the store and the
        packs follow writes ``param_state`` sees (else call ``clear_prefix_cache``)."""
        self._weights_free.clear()
        try:
            with self._weights_lock:
                write(self.model)
        finally:
            self._weights_free.set()

    # ----------------------------------------------------------------- event-loop side

    supports_streaming = True

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams,
                       on_tokens: Callable[[tuple[int, ...]], None] | None = None) -> Generation:
        """Sample a completion of ``prompt_ids``; concurrent calls share forward passes.
        ``on_tokens`` (streaming) gets, on this event loop and before the result, each run of new
        settled token ids (a look-ahead past a stop string waits until it is kept or dropped)."""
        return await self.submit_together([GenerateCall(prompt_ids, params)], on_tokens)[0]

    def submit_together(self, calls: Sequence[GenerateCall],
                        on_tokens: Callable[[tuple[int, ...]], None] | None = None,
                        ) -> list[asyncio.Future[Generation]]:
        """Put every call in the inbox at once, in order (``SubmitsTogether``): the worker takes
        none of them before it can take all, so the passes that run them depend on the calls
        alone, not on when each arrived (lockstep rollouts, ``arft.rollout.lockstep``). A call
        that fails before it runs (a bad prompt, a grammar that does not compile) fails alone."""
        if self._closed:
            raise EngineError("the transformers engine is closed: create a new engine to generate")
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Generation]] = []
        requests: list[Request] = []
        for call in calls:
            future: asyncio.Future[Generation] = loop.create_future()
            futures.append(future)
            try:
                request = self._request(call, future, loop, on_tokens)
            except Exception as e:  # noqa: BLE001 - this call's error, not the others'
                future.set_exception(e)
                continue
            if request is None:  # nothing to sample
                future.set_result(Generation(token_ids=(), logprobs=(), text="", finish_reason="length"))
            else:
                requests.append(request)
        if requests:
            self._ensure_batcher(loop)
            with self._lock:
                self._inbox.extend(requests)
            assert self._wakeup is not None
            self._wakeup.set()
        return futures

    def _request(self, call: GenerateCall, future: asyncio.Future[Generation], loop: asyncio.AbstractEventLoop,
                 on_tokens: Callable[[tuple[int, ...]], None] | None) -> Request | None:
        prompt = checked_prompt(call.prompt_ids, self.vocab_size)
        if call.params.max_new_tokens <= 0:
            return None
        matcher = None
        if call.params.grammar is not None:  # compile errors belong to this caller, not the batch
            matcher = self.masker.matcher(self.masker.compile(call.params.grammar), call.params.grammar.prefill)
        return Request(prompt, call.params, future, loop, matcher, on_tokens)

    async def aclose(self) -> None:
        """Stop the batcher; requests still waiting or generating fail with ``EngineError``."""
        self._closed = True
        self._stop.set()
        task, self._batcher = self._batcher, None
        if task is not None and not task.done():
            if task.get_loop() is asyncio.get_running_loop():
                assert self._wakeup is not None
                self._wakeup.set()
                await task  # returns after the worker's current step
            else:
                task.cancel()
        with self._lock:
            waiting, self._inbox = list(self._inbox), collections.deque()
        packed_linear.forget(self.model)
        self._thread.close()
        for request in waiting:
            self._deliver(request, EngineError("the transformers engine was closed before this "
                                               "request ran: create a new engine and retry"))

    def _ensure_batcher(self, loop: asyncio.AbstractEventLoop) -> None:
        # A batcher belongs to one event loop; a new loop (e.g. a new asyncio.run) gets its own.
        task = self._batcher
        if task is not None and not task.done() and task.get_loop() is loop:
            return
        self._wakeup = asyncio.Event()
        self._batcher = loop.create_task(self._run_batcher(self._wakeup), name="arft-batcher")

    async def _run_batcher(self, wakeup: asyncio.Event) -> None:
        while not self._stop.is_set():
            await wakeup.wait()
            wakeup.clear()
            if self._inbox and not self._stop.is_set():
                try:
                    await self._thread.run(self._serve)
                except RuntimeError as e:  # no worker thread to be had (the loop is shutting down)
                    for request in self._take(len(self._inbox)):
                        self._deliver(request, EngineError(f"could not start generation ({e}): "
                                                           "keep the event loop running and retry"))

    def _deliver(self, request: Request, outcome: Generation | BaseException) -> None:
        """Hand a result to the waiting caller (safe from any thread)."""
        if request.delivered:
            return
        self.stats.requests += 1  # counted first: the caller may read the stats once answered
        if isinstance(outcome, Generation) and self.policy is not None:  # the weights of its last pass
            outcome = outcome.model_copy(update={"policy": self.policy})
        request.deliver(outcome)

    # ----------------------------------------------------------------- worker-thread side

    def _take(self, n: int) -> list[Request]:
        """Up to ``n`` waiting requests, skipping those whose caller already gave up."""
        taken: list[Request] = []
        with self._lock:
            while self._inbox and len(taken) < n:
                request = self._inbox.popleft()
                if not request.future.done():
                    taken.append(request)
        return taken

    def _serve(self) -> None:
        """Decode until no row is left and nobody waits (runs in a worker thread)."""
        import torch

        owned: list[Request] = []
        try:
            with torch.inference_mode():
                self._decode_loop(owned)
        except Exception as e:  # noqa: BLE001 - every waiting caller must learn about it
            error = EngineError(f"generation failed ({type(e).__name__}: {e}); the requests of this "
                                "batch were dropped: check the model and prompts, then retry")
            error.__cause__ = e
            for request in owned:
                self._deliver(request, error)
        if self._stop.is_set():
            closed = EngineError("the transformers engine was closed during generation: create a "
                                 "new engine and retry")
            for request in owned:
                self._deliver(request, closed)

    def _decode_loop(self, owned: list[Request]) -> None:
        batch: KVBatch | None = None
        while not self._stop.is_set():
            self._weights_free.wait()  # a weight write waiting goes first
            with self._weights_lock:
                batch = self._admit_and_decode(batch, owned)
            if batch is None and not self._inbox:
                return

    def _admit_and_decode(self, batch: KVBatch | None, owned: list[Request]) -> KVBatch | None:
        """Admit waiting requests while there is room, and one decode step for every row (run in
        the admission's prefill pass where the model pass can: ``ModelPass.step_and_prefill``)."""
        room = self.max_batch_size - (batch.size if batch else 0)
        new = self._take(room) if room > 0 and (batch is None or batch.mergeable) else []
        owned.extend(new)
        decoded = False
        if new:
            along = batch if batch is not None and self._pass.mixes else None
            fresh = self._retire(self._prefill(new, along))
            if along is not None:  # its decode step ran in the prefill's pass
                batch, decoded = self._retire(along), True
            if batch is None:
                batch = fresh
            elif fresh is not None:
                batch.merge(fresh)
        if batch is not None and not decoded:
            self._decode_step(batch)
            batch = self._retire(batch)
        owned[:] = [r for r in owned if not r.delivered]
        return batch

    def _prefill(self, requests: list[Request], along: KVBatch | None = None) -> KVBatch:
        """Run the prompts of ``requests`` (reusing stored prefixes, each distinct prompt once)
        and sample each one's first token; ``along``: a batch whose decode step shares the pass."""
        store = self.prefix_cache if self.prefix_cache.budget_bytes > 0 else None
        if store is not None:
            store.check_weights(weights_fingerprint(self.model))
        prompts = [r.prompt for r in requests]
        common = shared_prefix(distinct(prompts)[0], store)
        if common is not None:  # e.g. a system prompt with worked examples: run it once
            self._keep_kv(self._run(plan([common], store, self.device, self._new_cache()))[0],
                          0, common)
        heads = seeded_heads([r.prompt for r in requests if r.params.seed is not None], store)
        if heads:  # a seeded prompt's first token: one path, cold or warm (see seeded_heads)
            ran = self._run(plan(heads, store, self.device, self._new_cache()))[0]
            for u, head in enumerate(heads):
                self._keep_kv(ran, u, head)
        batch, logits = self._run(plan(prompts, store, self.device, self._new_cache()), along)
        self.stats.prompt_tokens += sum(len(p) for p in prompts)
        expand = batch.rows  # the distinct prompt of each request
        if expand != list(range(len(requests))):  # duplicates: copy their rows
            batch.select(expand)
            logits = logits[expand]
        batch.rows = [new_row(r, self.device) for r in requests]
        self._accept(batch.rows, logits)
        return batch

    def _run(self, p: PrefillPlan, along: KVBatch | None = None) -> tuple[KVBatch, "torch.Tensor"]:
        """One prefill pass (with ``along``'s decode step); its rows are ``p.expand`` until set."""
        batch = KVBatch(list(p.expand), p.cache, p.mask, self.max_batch_size, p.shared_ids)
        fill = PassInputs(p.ids, p.positions, batch.mask, batch.cache)
        if along is None:
            logits = self._pass(*fill)
        else:
            step = along.step_inputs(self.device, self._pass.cascade)
            step_logits, logits, one_pass = self._pass.step_and_prefill(step, fill)
            self._stepped(along, step.shared, step_logits)
            self.stats.steps_in_prefills += one_pass
        self.stats.prefills += 1
        self.stats.prefill_batch_sizes[p.ids.shape[0]] += 1
        self.stats.prefill_tokens += p.computed_tokens
        return batch, logits

    def _new_cache(self) -> Any:
        from transformers import DynamicCache

        cache = DynamicCache()
        cache.layer_class_to_replicate = growing_layer()
        return cache

    def _keep_kv(self, batch: KVBatch, i: int, ids: list[int]) -> None:
        """Put row ``i``'s keys and values for (the computed part of) ``ids`` in the store."""
        if self.prefix_cache.budget_bytes <= 0 or not batch.mergeable:
            return
        n = min(int(batch.mask[i].sum()), len(ids))
        self.prefix_cache.insert(ids[:n], batch.row_kv(i, n))

    def _decode_step(self, batch: KVBatch) -> None:
        """Feed every row's last sampled token and sample the next one."""
        step = batch.step_inputs(self.device, self._pass.cascade)
        self._stepped(batch, step.shared, self._pass(*step))

    def _stepped(self, batch: KVBatch, shared: int, logits: "torch.Tensor") -> None:
        """Count a decode step's pass and sample its tokens."""
        self.stats.decode_steps += 1
        self.stats.decode_batch_sizes[batch.size] += 1
        self.stats.cascade_steps += cascade.reads_once(shared, batch.size)
        self.stats.max_rows = max(self.stats.max_rows, batch.size)
        self._accept(batch.rows, logits)

    def _accept(self, rows: list[Row], logits: "torch.Tensor") -> None:
        """Sample one token per row, record it and decide whether the row is finished."""
        import torch

        if self._rng is None:
            self._rng = torch.Generator(device=self.device)
            self._rng.seed()  # non-deterministic: requests that want determinism pass a seed
        matchers = [r.request.matcher for r in rows]
        any_grammar = any(m is not None for m in matchers)
        constrained = [False] * len(rows)
        forced: dict[int, int] = {}
        if any_grammar:
            logits = logits.float()  # masked in place: never touch the model's output buffer
            constrained = self.masker.mask(logits, matchers)
            forced = self.masker.forced_tokens(matchers, constrained)
            forced.update(self._closing_tokens(rows, matchers, constrained))
        tokens, logprobs = sample_rows(logits, [r.sampling for r in rows],
                                       [r.generator for r in rows], self._rng)
        token_list, logprob_list = tokens.tolist(), logprobs.tolist()
        for i, token in forced.items():  # one allowed text: written, not sampled (probability 1)
            token_list[i], logprob_list[i] = token, 0.0
        if any_grammar:
            self.masker.accept(matchers, token_list)
        for row, token, logprob, limited in zip(rows, token_list, logprob_list, constrained):
            row.tokens.append(token)
            row.logprobs.append(logprob)
            if row.request.matcher is not None:
                row.constrained.append(limited)
            row.finish = self._finish_rules.finish_reason(row)
            row.stream_settled()
        self.stats.generated_tokens += len(rows)
        self.stats.constrained_tokens += sum(constrained)

    def _closing_tokens(self, rows: list[Row], matchers: list[Any], constrained: list[bool]) -> dict[int, int]:
        """Row -> the next token of its open call's shortest completion, for rows whose budget
        runs out before the call would close (``arft.engines.call_closing``; marked constrained).
        Tool calls only: a whole JSON reply cut by its budget stays cut, as OpenAI's are."""
        budgets = [RowBudget(m if isinstance(r.request.params.grammar, ToolGrammar) else None,
                             r.request.params.max_new_tokens - len(r.tokens), r.closing)
                   for r, m in zip(rows, matchers)]
        before = sum(r.closing.calls for r in rows)
        closing = self.closer.forced(budgets, constrained)
        for i in closing:
            constrained[i] = True
        self.stats.closed_calls += sum(r.closing.calls for r in rows) - before
        return closing

    def _retire(self, batch: KVBatch) -> KVBatch | None:
        """Answer finished rows, drop them and rows whose caller gave up; ``None`` when empty."""
        gone = []
        for i, row in enumerate(batch.rows):
            if row.finish is not None:
                matcher = row.request.matcher
                if row.finish == "length" and matcher is not None and self.masker.in_call(matcher):
                    self.stats.cut_calls += 1
                self.stats.dropped_calls += row.closing.dropped
                self._keep_kv(batch, i, row.request.prompt + row.tokens)  # stored before answered
                self._deliver(row.request, generation(row, self.tokenizer))
            elif row.request.future.done():  # cancelled by its caller: stop spending compute
                row.request.delivered = True
            else:
                continue
            gone.append(i)
        if len(gone) == batch.size:
            return None
        if gone:
            batch.drop(gone)
        return batch
