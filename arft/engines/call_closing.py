"""Closing an open constrained call before the turn's token budget runs out.

The grammar guarantees a valid call only if the call is allowed to finish: a call still open when
``max_new_tokens`` arrives (a long string argument, a second call opened late) is cut off and
becomes a parse error. ``CallCloser`` prevents that. For a row inside a call (the grammar allows
no end of turn yet) near the end of its budget, it finds the grammar's shortest completion of the
call (``shortest_completion``) and, once the tokens that completion needs (plus a small margin)
fill what is left of the budget, writes that completion token by token instead of sampling.

The forced tokens are recorded as jump-forward's are: ``constrained`` and logprob 0, because the
behaviour policy (the masked distribution, narrowed to the completion) put all its mass on them;
see docs/constrained_tool_calls.md. ``ClosingState.calls`` counts how often a row had to.

The search is a best-first search through forks of the row's matcher, fewest chosen characters
first; text the grammar alone determines (a key path, the call's end tag) is taken whole
(xgrammar's jump-forward string) and costs nothing, since every completion through that state
writes it. Where many characters are allowed (inside a string, a number) only the one that closes
or ends the value soonest is tried, so a search is a few dozen forks (about a millisecond); a
bounded number of states keeps a pathological schema from stalling a decode step (no completion
found then: the row samples as before, and may be cut).

xgrammar is imported lazily (through ``arft.engines.grammar``).
"""

from __future__ import annotations

import heapq
import itertools
import string
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, NamedTuple, Sequence

from arft.engines.grammar import _xgrammar

if TYPE_CHECKING:
    import xgrammar as xgr
    from transformers import PreTrainedTokenizerBase

CLOSING_MARGIN = 2
"""Tokens kept in reserve beyond what the completion needs: a sampled token may lengthen the
completion (open a key, an element) by a little before the next check."""
HORIZON = 48
"""Completions are searched only in a row's last ``HORIZON`` tokens (a completion longer than
that is a schema with many required fields still to write: it starts closing at once)."""
SLACK = 8
"""How far from needing to close a row must be for its search to be skipped (see ``_due``)."""
MAX_NODES = 400
"""Most matcher states one search expands."""
PREFERRED = '"}]0a'
"""Characters tried first where many are allowed: a string's close, an object's and an array's,
the shortest number, a filler for a string that needs more characters (``minLength``)."""
WIDE = 4
"""A state allowing more characters than this is free content (a string's, a number's digits): only
the first allowed character of ``PREFERRED`` is tried there (a string's close ends it whatever it
held, and a longer value only delays the call's close)."""
BRANCH = 8
"""Most characters tried from one state when none of ``PREFERRED`` is allowed there."""


@dataclass
class ClosingState:
    """One row's closing: the completion tokens still to write, and how many calls it closed."""

    pending: list[int] = field(default_factory=list)
    need: int | None = None
    """Tokens the open call's completion needed when last searched (None: not searched yet)."""
    searched_at: int = 0
    """The row's remaining budget at that search."""
    calls: int = 0
    """Calls this row closed by the grammar's shortest completion."""
    dropped: int = 0
    """Further calls this row began after a call's close with too little room left, dropped with
    the look-ahead (``FinishRules``)."""

    @property
    def closed_last(self) -> bool:
        """Whether the row's newest call was closed here (the turn ends at that call's close)."""
        return self.calls > 0 and not self.pending


class ClosedTail(NamedTuple):
    """Where a replayed completion starts closing its call, and the tokens that close it."""

    at: int
    tokens: list[int]


@dataclass(frozen=True)
class RowBudget:
    """What ``CallCloser.forced`` needs to know of one batch row."""

    matcher: "xgr.GrammarMatcher | None"
    remaining: int
    """Tokens this row may still write, the one about to be written included."""
    state: ClosingState


class CallCloser:
    """Finds shortest completions of open calls for one tokenizer and decides when to write them."""

    def __init__(self, tokenizer: "PreTrainedTokenizerBase", vocab_size: int, stop_ids: Iterable[int],
                 margin: int = CLOSING_MARGIN) -> None:
        self.tokenizer = tokenizer
        self.stop_ids = sorted(set(stop_ids))
        self.margin = margin
        self.search_s = 0.0
        """Seconds spent deciding and searching completions (for benchmarks)."""
        self.enabled = True
        """False turns closing off (a call may then be cut by the budget; for comparisons)."""
        self._vocab_size = vocab_size
        self._chars = _single_char_tokens(tokenizer, vocab_size)
        self._bitmask: Any = None

    def forced(self, rows: Sequence[RowBudget], limited: Sequence[bool]) -> dict[int, int]:
        """Row -> the next completion token, for rows that are closing (or must start now)."""
        out: dict[int, int] = {}
        if not self.enabled:
            return out
        start = time.perf_counter()
        for i, (row, lim) in enumerate(zip(rows, limited)):
            state = row.state
            if not lim:
                state.need = None  # outside a call: the next call starts afresh
            elif not state.pending and row.matcher is not None and self._due(row):
                tokens = self.completion_tokens(row.matcher)
                state.need, state.searched_at = (None if tokens is None else len(tokens)), row.remaining
                if tokens and len(tokens) + self.margin >= row.remaining:
                    state.pending, state.calls = tokens, state.calls + 1
            if state.pending:
                out[i] = state.pending.pop(0)
        self.search_s += time.perf_counter() - start
        return out

    def _due(self, row: RowBudget) -> bool:
        """Whether to search ``row``'s completion now: within ``HORIZON``, at every step once the
        budget comes within ``SLACK`` of the last need, else every ``SLACK`` steps (a sampled token
        changes the need by a token or two, rarely more)."""
        state = row.state
        if row.remaining > HORIZON:
            return False
        if state.need is None:
            return True
        return (row.remaining - self.margin - state.need <= SLACK
                or state.searched_at - row.remaining >= SLACK)

    def close_replayed(self, matcher: "xgr.GrammarMatcher", tokens: Sequence[int],
                       max_new_tokens: int) -> ClosedTail | None:
        """For a completion sampled elsewhere under the same grammar (a vLLM server, which cannot
        be told to close a call) and cut inside a call: replays ``tokens`` through ``matcher``
        (fresh, advanced by nothing yet) with ``forced``'s rule, and returns where that rule would
        have started closing and the completion it would have written; None where it never
        would have, or where the completion would not fit (a call opened too late). The tokens
        before that point are exactly what this engine would have sampled, so keeping them and
        writing the completion is the same behaviour policy."""
        state = ClosingState()
        for j, token in enumerate(tokens):
            ends, _ = self._next_chars(matcher)
            forced = self.forced([RowBudget(matcher, max_new_tokens - j, state)], [not ends])
            if forced:
                tail = [forced[0], *state.pending]
                return ClosedTail(j, tail) if j + len(tail) <= max_new_tokens else None
            if not matcher.accept_token(int(token)):
                return None
        return None

    def completion_tokens(self, matcher: "xgr.GrammarMatcher") -> list[int] | None:
        """The token ids of ``shortest_completion`` (checked against a fork of ``matcher``; empty
        when the turn may already end), or None when none was found or its tokens do not fit."""
        text = self.shortest_completion(matcher)
        if text is None:
            return None
        tokens = [int(t) for t in self.tokenizer.encode(text, add_special_tokens=False)]
        check = matcher.fork()
        if not all(check.accept_token(t) for t in tokens):
            return None
        return tokens

    def shortest_completion(self, matcher: "xgr.GrammarMatcher", max_nodes: int = MAX_NODES) -> str | None:
        """The shortest text found after which ``matcher`` allows an end of turn ("" when it
        already does), by a best-first search over characters; None when none within
        ``max_nodes`` states. ``matcher`` itself is not advanced."""
        start = matcher.fork()
        order = itertools.count()
        heap: list[tuple[int, int, str, Any]] = [(0, next(order), _jump(start), start)]
        for _ in range(max_nodes):
            if not heap:
                return None
            steps, _, text, m = heapq.heappop(heap)
            ends, chars = self._next_chars(m)
            if ends:
                return text
            for c in chars:
                child = m.fork()
                if child.accept_string(c):
                    heapq.heappush(heap, (steps + 1, next(order), text + c + _jump(child), child))
        return None

    def _next_chars(self, m: "xgr.GrammarMatcher") -> tuple[bool, list[str]]:
        """Whether an end-of-turn token is allowed next, and the characters worth trying."""
        xgr = _xgrammar()
        if self._bitmask is None:
            self._bitmask = xgr.allocate_token_bitmask(1, self._vocab_size)
        m.fill_next_token_bitmask(self._bitmask, 0)
        words = self._bitmask[0].tolist()

        def allowed(t: int) -> bool:
            return bool(words[t // 32] >> (t % 32) & 1)

        if any(allowed(t) for t in self.stop_ids):
            return True, []
        chars = [c for c, t in self._chars.items() if allowed(t)]
        if len(chars) > WIDE:  # free content: the first closing character will do
            preferred = [c for c in PREFERRED if c in chars]
            chars = preferred[:1] or chars[:BRANCH]
        return False, chars


def _jump(m: "xgr.GrammarMatcher") -> str:
    """Advance ``m`` through the text the grammar alone determines next; that text."""
    text = str(m.find_jump_forward_string())
    if text and not m.accept_string(text):
        return ""
    return text


def _single_char_tokens(tokenizer: "PreTrainedTokenizerBase", vocab_size: int) -> dict[str, int]:
    """Printable ASCII character -> the token that is exactly it (where the vocabulary has one)."""
    out: dict[str, int] = {}
    for c in string.printable:
        ids = tokenizer.encode(c, add_special_tokens=False)
        if len(ids) == 1 and 0 <= ids[0] < vocab_size and tokenizer.decode(ids) == c:
            out[c] = int(ids[0])
    return out
