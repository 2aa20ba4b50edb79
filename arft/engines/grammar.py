"""Token masks for ``ToolGrammar`` constraints, with xgrammar (the grammar engine vLLM uses).

``ToolCallMasker`` belongs to one engine (one tokenizer and vocabulary):

* ``compile(grammar)`` compiles a toolset's grammar once and caches it (by the grammar's key);
  a schema the grammar engine cannot compile is a ``ConstraintError`` naming the tool.
* ``matcher(compiled, prefill)`` starts one request's matcher, advanced through the prefill.
* ``mask(logits, matchers)`` fills every constrained row's allowed-token bitmask (xgrammar's
  batched, multi-threaded fill) and sets the logits of disallowed tokens to ``-inf`` in place.
  It returns, per row, whether the mask excluded anything (free text outside a call excludes
  nothing: those positions are not "constrained").
* ``accept(matchers, tokens)`` advances the matchers by the sampled tokens.

xgrammar and torch are imported lazily (heavy imports stay out of ``arft --help``).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from arft.engines.constraints import ConstraintError, ToolGrammar, structural_tag, with_search_patterns

if TYPE_CHECKING:
    import torch

_CACHE_SIZE = 256


def _xgrammar() -> Any:
    try:
        import xgrammar
    except ImportError as e:  # pragma: no cover - the local extra installs it
        raise ConstraintError(
            "constrained tool calls need the xgrammar package: pip install 'arft[local]' (or "
            "pip install xgrammar), or set rollout.constrained_tool_calls: false") from e
    return xgrammar


class ToolCallMasker:
    """Compiles ``ToolGrammar``s for one tokenizer and masks logits with them."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: Iterable[int]) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.stop_ids = sorted(set(stop_ids))
        self.mask_s = 0.0
        """Seconds spent filling and applying masks and advancing matchers (for benchmarks)."""
        self._lock = threading.Lock()  # compile() runs on the event loop, masks in the worker
        self._compiler: Any = None
        self._compiled: dict[str, Any] = {}
        self._batch: Any = None
        self._bitmask: "torch.Tensor | None" = None

    def _get_compiler(self) -> Any:
        if self._compiler is None:
            xgr = _xgrammar()
            info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.vocab_size,
                                                      stop_token_ids=self.stop_ids)
            self._compiler = xgr.GrammarCompiler(info, cache_enabled=True)
        return self._compiler

    def compile(self, grammar: ToolGrammar) -> Any:
        """The compiled grammar of ``grammar``'s toolset (cached)."""
        key = grammar.key()
        with self._lock:
            compiled = self._compiled.get(key)
            if compiled is not None:
                return compiled
            compiler = self._get_compiler()
            try:
                compiled = compiler.compile_structural_tag(structural_tag(grammar))
            except Exception as e:  # noqa: BLE001 - find the tool to blame, then say so
                raise self._compile_error(compiler, grammar, e) from e
            if len(self._compiled) >= _CACHE_SIZE:
                self._compiled.pop(next(iter(self._compiled)))
            self._compiled[key] = compiled
            return compiled

    @staticmethod
    def _compile_error(compiler: Any, grammar: ToolGrammar, error: Exception) -> ConstraintError:
        """A ``ConstraintError`` that names the tool whose schema does not compile."""
        for tool in grammar.tools:
            try:
                compiler.compile_json_schema(with_search_patterns(tool.parameters))
            except Exception as e:  # noqa: BLE001
                reason = str(e).strip().splitlines()[-1]
                return ConstraintError(
                    f"tool '{tool.name}': its parameters schema cannot be compiled for constrained "
                    f"decoding ({reason}); fix that part of the schema, or set "
                    "rollout.constrained_tool_calls: false and remove \"strict\": true from the tool")
        return ConstraintError(f"the tool-call grammar did not compile ({error}); check the tool "
                               "names and the chat format's call syntax")

    def matcher(self, compiled: Any, prefill: str = "") -> Any:
        """A fresh matcher of ``compiled``, advanced through ``prefill``."""
        m = _xgrammar().GrammarMatcher(compiled)
        if prefill and not m.accept_string(prefill):
            raise ConstraintError(f"the forced start of the call {prefill!r} does not fit the "
                                  "tool-call grammar: the tool_choice names a tool the row cannot call")
        return m

    def mask(self, logits: "torch.Tensor", matchers: Sequence[Any]) -> list[bool]:
        """Mask ``logits`` ``[B, V]`` in place for the rows with a matcher; which rows changed."""
        import torch

        rows = [i for i, m in enumerate(matchers) if m is not None and not m.is_terminated()]
        if not rows:
            return [False] * len(matchers)
        start = time.perf_counter()
        xgr = _xgrammar()
        if self._bitmask is None or self._bitmask.shape[0] < len(matchers):
            self._bitmask = xgr.allocate_token_bitmask(max(len(matchers), 32), self.vocab_size)
        if self._batch is None:
            self._batch = xgr.BatchGrammarMatcher()
        bitmask = self._bitmask
        self._batch.batch_fill_next_token_bitmask([matchers[i] for i in rows], bitmask, rows)
        index = torch.tensor(rows)
        # A row whose bitmask is all ones (-1 as int32) allows every token: nothing to apply.
        limited = (bitmask[index] != -1).any(dim=-1).tolist()
        apply = [i for i, lim in zip(rows, limited) if lim]
        if apply:
            xgr.apply_token_bitmask_inplace(logits, bitmask[: len(matchers)].to(logits.device),
                                            vocab_size=self.vocab_size, indices=apply)
        self.mask_s += time.perf_counter() - start
        changed = set(apply)
        return [i in changed for i in range(len(matchers))]

    def accept(self, matchers: Sequence[Any], tokens: Sequence[int]) -> None:
        """Advance each row's matcher by its sampled token."""
        start = time.perf_counter()
        for m, token in zip(matchers, tokens):
            if m is None or m.is_terminated():
                continue
            if not m.accept_token(int(token)):
                raise ConstraintError(
                    f"token {token} ({self.tokenizer.decode([int(token)])!r}) was sampled outside the "
                    "tool-call grammar's mask: this is a bug in arft's masking, please report it")
        self.mask_s += time.perf_counter() - start
