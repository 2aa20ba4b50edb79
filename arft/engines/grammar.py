"""Token masks for ``ToolGrammar`` constraints (and whole-reply ``JsonGrammar``s), with xgrammar
(the grammar engine vLLM uses).

``ToolCallMasker`` belongs to one engine (one tokenizer and vocabulary):

* ``compile(grammar)`` compiles a toolset's grammar once and caches it (by the grammar's key);
  a schema the grammar engine cannot compile is a ``ConstraintError`` naming the tool.
* ``matcher(compiled, prefill)`` starts one request's matcher, advanced through the prefill.
* ``mask(logits, matchers)`` fills every constrained row's allowed-token bitmask (xgrammar's
  batched, multi-threaded fill) and sets the logits of disallowed tokens to ``-inf`` in place.
  It returns, per row, whether the mask excluded anything (free text outside a call excludes
  nothing: those positions are not "constrained").
* ``forced_tokens(matchers, limited)``: where the grammar allows exactly one continuation text
  (the key path of a call, its close), the first token of that text. The engine writes it instead
  of sampling (jump-forward decoding, as SGLang does), with logprob 0: the behaviour policy put all
  its mass there. Without it a small model merges the opening quote of a value with text of its
  own (``"}}``) and never closes the string.
* ``in_call(matcher)``: whether the matcher is inside a call (the end of the turn is not allowed):
  a stop string written inside an argument is content, not the end of the call.
* ``accept(matchers, tokens)`` advances the matchers by the sampled tokens.

The arguments are written in the chat formats' canonical JSON spacing (``", "`` and ``": "``, no
other whitespace): each tool's schema is converted to a grammar with xgrammar's JSON-schema
converter and placed inside the call's tag.

xgrammar and torch are imported lazily (heavy imports stay out of ``arft --help``).
"""

from __future__ import annotations

import json
import re
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from arft.chat.constraints import ConstraintError, Grammar, GrammarTool, JsonGrammar, ToolGrammar, with_search_patterns

if TYPE_CHECKING:
    import torch
    import xgrammar as xgr
    from transformers import PreTrainedTokenizerBase

_CACHE_SIZE = 256
AFTER_CALL_TOKENS = 8
"""Text a whole-turn grammar lets the model write after its last call (then dropped by the caller)."""


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

    def __init__(self, tokenizer: "PreTrainedTokenizerBase", vocab_size: int, stop_ids: Iterable[int]) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.stop_ids = sorted(set(stop_ids))
        self.mask_s = 0.0
        """Seconds spent filling and applying masks and advancing matchers (for benchmarks)."""
        self._lock = threading.Lock()  # compile() runs on the event loop, masks in the worker
        self._compiler: "xgr.GrammarCompiler | None" = None
        self._compiled: dict[str, "xgr.CompiledGrammar"] = {}
        self._batch: "xgr.BatchGrammarMatcher | None" = None
        self._bitmask: "torch.Tensor | None" = None

    def _get_compiler(self) -> "xgr.GrammarCompiler":
        if self._compiler is None:
            xgr = _xgrammar()
            info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.vocab_size,
                                                      stop_token_ids=self.stop_ids)
            self._compiler = xgr.GrammarCompiler(info, cache_enabled=True)
        return self._compiler

    def compile(self, grammar: Grammar) -> "xgr.CompiledGrammar":
        """The compiled grammar of ``grammar``'s toolset, or of its JSON reply (cached)."""
        if isinstance(grammar, JsonGrammar):
            return self._cached(grammar.key(), lambda compiler: _compile_json(compiler, grammar))
        return self._cached(grammar.key(), lambda compiler: _compile_tag(compiler, structural_tag(grammar)))

    def compile_tag(self, tag: dict[str, object]) -> "xgr.CompiledGrammar":
        """A structural tag compiled as it is (cached by its JSON), e.g. ``turn_tag``'s."""
        return self._cached("tag:" + json.dumps(tag, sort_keys=True), lambda compiler: _compile_tag(compiler, tag))

    def _cached(self, key: str,
                build: Callable[["xgr.GrammarCompiler"], "xgr.CompiledGrammar"]) -> "xgr.CompiledGrammar":
        """``build(compiler)``, compiled once per ``key`` (the oldest of ``_CACHE_SIZE`` evicted)."""
        with self._lock:
            compiled = self._compiled.get(key)
            if compiled is None:
                compiled = build(self._get_compiler())
                if len(self._compiled) >= _CACHE_SIZE:
                    self._compiled.pop(next(iter(self._compiled)))
                self._compiled[key] = compiled
            return compiled

    def matcher(self, compiled: "xgr.CompiledGrammar", prefill: str = "") -> "xgr.GrammarMatcher":
        """A fresh matcher of ``compiled``, advanced through ``prefill``."""
        m = _xgrammar().GrammarMatcher(compiled)
        if prefill and not m.accept_string(prefill):
            raise ConstraintError(f"the forced start of the call {prefill!r} does not fit the "
                                  "tool-call grammar: the tool_choice names a tool the row cannot call")
        return m

    def mask(self, logits: "torch.Tensor", matchers: Sequence["xgr.GrammarMatcher | None"]) -> list[bool]:
        """Mask ``logits`` ``[B, V]`` in place for the rows with a matcher; which rows changed."""
        import torch

        live = [(i, m) for i, m in enumerate(matchers) if m is not None and not m.is_terminated()]
        rows = [i for i, _ in live]
        if not rows:
            return [False] * len(matchers)
        start = time.perf_counter()
        xgr = _xgrammar()
        if self._bitmask is None or self._bitmask.shape[0] < len(matchers):
            self._bitmask = xgr.allocate_token_bitmask(max(len(matchers), 32), self.vocab_size)
        if self._batch is None:
            self._batch = xgr.BatchGrammarMatcher()
        bitmask = self._bitmask
        self._batch.batch_fill_next_token_bitmask([m for _, m in live], bitmask, rows)
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

    def forced_tokens(self, matchers: Sequence["xgr.GrammarMatcher | None"], limited: Sequence[bool]) -> dict[int, int]:
        """Row -> the token to write without sampling, where the grammar allows one text only."""
        forced: dict[int, int] = {}
        start = time.perf_counter()
        for i, (m, lim) in enumerate(zip(matchers, limited)):
            if m is None or not lim:
                continue  # free text (nothing excluded) is never forced
            text = m.find_jump_forward_string()
            if text:
                ids = self.tokenizer.encode(text, add_special_tokens=False)
                if ids:
                    forced[i] = int(ids[0])
        self.mask_s += time.perf_counter() - start
        return forced

    def in_call(self, matcher: "xgr.GrammarMatcher") -> bool:
        """Whether ``matcher`` is inside a call: no end-of-turn token is allowed next."""
        xgr = _xgrammar()
        bitmask = xgr.allocate_token_bitmask(1, self.vocab_size)
        matcher.fill_next_token_bitmask(bitmask, 0)
        words = bitmask[0]
        return not any(int(words[t // 32]) >> (t % 32) & 1 for t in self.stop_ids)

    def limited_positions(self, compiled: "xgr.CompiledGrammar", tokens: Sequence[int]) -> list[bool]:
        """Replays ``tokens`` (sampled elsewhere, e.g. by a vLLM server under the same grammar)
        through ``compiled``: per token, whether the mask excluded anything there.
        ``ConstraintError`` when a token is outside the grammar (the two engines disagree)."""
        xgr = _xgrammar()
        matcher = self.matcher(compiled)
        bitmask = xgr.allocate_token_bitmask(1, self.vocab_size)
        limited = []
        for token in tokens:
            if matcher.is_terminated():
                limited.append(False)
                continue
            matcher.fill_next_token_bitmask(bitmask, 0)
            limited.append(bool((bitmask[0] != -1).any()))
            if not matcher.accept_token(int(token)):
                raise ConstraintError(f"token {token} ({self.tokenizer.decode([int(token)])!r}) is outside "
                                      "the grammar it was sampled under: the server's constraint and "
                                      "arft's disagree (a vLLM / xgrammar version mismatch?)")
        return limited

    def accept(self, matchers: Sequence["xgr.GrammarMatcher | None"], tokens: Sequence[int]) -> None:
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


def _compile_tag(compiler: "xgr.GrammarCompiler", tag: dict[str, object]) -> "xgr.CompiledGrammar":
    """A structural tag compiled (``ConstraintError`` when it does not: the converted tools'
    grammars are fine, so the call syntax is what is wrong)."""
    try:
        return compiler.compile_structural_tag(tag)
    except Exception as e:  # noqa: BLE001 - xgrammar raises RuntimeError/ValueError alike
        raise ConstraintError(f"the tool-call grammar did not compile ({e}); check the tool names "
                              "and the chat format's call syntax") from e


def _compile_json(compiler: "xgr.GrammarCompiler", grammar: JsonGrammar) -> "xgr.CompiledGrammar":
    """A whole-reply JSON grammar, in canonical spacing (``ConstraintError`` naming the schema)."""
    try:
        if grammar.json_schema is None:
            return compiler.compile_builtin_json_grammar()
        return compiler.compile_json_schema(json.dumps(with_search_patterns(grammar.json_schema)),
                                            any_whitespace=False, separators=(", ", ": "), strict_mode=True)
    except Exception as e:  # noqa: BLE001 - xgrammar raises RuntimeError/ValueError alike
        reason = _reason(e)
        raise ConstraintError(f"{grammar.name}: the JSON schema cannot be compiled for constrained "
                              f"decoding ({reason}); fix that part of the schema") from e


def _reason(e: Exception) -> str:
    """The last line of xgrammar's message without its C++ source place (``[12:00:00]
    /project/cpp/json_schema_converter.cc:5082: ``): the reason is what a user can act on."""
    line = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
    return re.sub(r"^(\[[\d:]+\] )?\S+\.(cc|cpp|h):\d+: ?", "", line) or type(e).__name__


def structural_tag(grammar: ToolGrammar) -> dict[str, Any]:
    """The grammar as an xgrammar structural tag: free text with triggered, schema-checked calls."""
    tags = [{"type": "tag",
             "begin": f"{grammar.call_begin}{json.dumps(t.name, ensure_ascii=False)[1:-1]}{grammar.args_infix}",
             "content": {"type": "grammar", "grammar": arguments_ebnf(t)},
             "end": grammar.call_end} for t in grammar.tools]
    return {"type": "structural_tag",
            "format": {"type": "triggered_tags", "triggers": [grammar.trigger], "tags": tags}}


def turn_tag(grammar: ToolGrammar, parallel: bool = True) -> dict[str, Any]:
    """A whole assistant turn as a structural tag, for servers that cannot stop at a call's close
    the way the transformers engine does (a stop string there would also fire inside an
    argument): free text without the trigger, then optionally calls separated by newlines (one
    only, without ``parallel``) and at most ``AFTER_CALL_TOKENS`` of text that opens no call
    (which the caller drops, as the transformers engine drops its look-ahead), then the end of
    the turn. Started after ``grammar.prefill`` (a
    forced call's opening, already in the prompt): the rest of that call, then further calls."""
    def call(t: GrammarTool, skip: str = "") -> dict[str, Any]:
        begin = f"{grammar.call_begin}{json.dumps(t.name, ensure_ascii=False)[1:-1]}{grammar.args_infix}"
        return {"type": "tag", "begin": begin[len(skip):],
                "content": {"type": "grammar", "grammar": arguments_ebnf(t)}, "end": grammar.call_end}

    any_call = {"type": "or", "elements": [call(t) for t in grammar.tools]}
    more = [{"type": "star", "content": {"type": "sequence", "elements": [
        {"type": "const_string", "value": "\n"}, any_call]}}] if parallel else []
    # After the last call the model may write a little more text that opens no call (the
    # transformers engine's look-ahead); the caller drops it, so the turn ends at the call's close.
    more.append({"type": "optional", "content": {"type": "any_text", "excludes": [grammar.trigger],
                                                  "max_tokens": AFTER_CALL_TOKENS}})
    if grammar.prefill:
        begun = [call(t, grammar.prefill) for t in grammar.tools
                 if call(t)["begin"].startswith(grammar.prefill)]
        if not begun:
            raise ConstraintError(f"the forced start of the call {grammar.prefill!r} fits no tool of the grammar")
        elements = [{"type": "or", "elements": begun}, *more]
    else:
        elements = [{"type": "any_text", "excludes": [grammar.trigger]},
                    {"type": "optional", "content": {"type": "sequence", "elements": [any_call, *more]}}]
    return {"type": "structural_tag", "format": {"type": "sequence", "elements": elements}}


def arguments_ebnf(tool: GrammarTool) -> str:
    """The EBNF of ``tool``'s arguments object in canonical spacing; ``ConstraintError`` naming the
    tool when its schema cannot be converted."""
    try:
        converted = _xgrammar().Grammar.from_json_schema(
            with_search_patterns(tool.parameters), any_whitespace=False, separators=(", ", ": "),
            strict_mode=True)
    except Exception as e:  # noqa: BLE001 - xgrammar raises RuntimeError/ValueError alike
        reason = _reason(e)
        raise ConstraintError(
            f"tool '{tool.name}': its parameters schema cannot be compiled for constrained decoding "
            f"({reason}); fix that part of the schema, or set rollout.constrained_tool_calls: "
            "false and remove \"strict\": true from the tool") from e
    return str(converted)
