"""When a decoding row ends: eos, stop strings (with the look-ahead for a continuation), length.

A fake one-character-per-token tokenizer, no model: the rules see only token ids and text.
"""

from __future__ import annotations

import asyncio
from typing import Any

from arft.engines.base import SamplingParams
from arft.engines.transformers.decode_rows import LOOK_AHEAD_TOKENS, FinishRules, Request, Row, generation
from arft.engines.transformers.sampling import RowSampling

EOS = 0


class CharTokenizer:
    """Token id n is the character chr(n); 0 is eos and decodes to nothing."""

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(chr(i) for i in ids if i != EOS)


def ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def feed(text_or_ids: str | list[int], **params: Any) -> tuple[Row, list[str | None]]:
    """Append tokens to a fresh row one by one, as the engine does, recording each verdict."""
    loop = asyncio.new_event_loop()
    try:
        p = SamplingParams(temperature=1.0, top_p=1.0, top_k=0,
                           **({"max_new_tokens": 100} | params))
        request = Request([1], p, loop.create_future(), loop)
        row = Row(request, RowSampling(1.0, 1.0, 0), None, stop_window=32)
        # No grammar in these rows: the masker is never asked.
        rules = FinishRules(CharTokenizer(), frozenset({EOS}), None)  # type: ignore[arg-type]
        verdicts = []
        tokens = ids(text_or_ids) if isinstance(text_or_ids, str) else text_or_ids
        for token in tokens:
            row.tokens.append(token)
            row.logprobs.append(-0.5)
            row.finish = rules.finish_reason(row)
            verdicts.append(row.finish)
            if verdicts[-1] is not None:
                break
        return row, verdicts
    finally:
        loop.close()


def test_eos_and_length() -> None:
    assert feed([*ids("hi"), EOS])[1] == [None, None, "eos"]
    assert feed("abcdef", max_new_tokens=3)[1] == [None, None, "length"]


def test_a_stop_string_ends_the_row_after_the_token_that_completes_it() -> None:
    row, verdicts = feed("ab</x>cd", stop=("</x>",))
    assert verdicts[-1] == "stop" and CharTokenizer().decode(row.tokens) == "ab</x>"


def test_a_continuation_after_the_stop_cancels_it() -> None:
    row, verdicts = feed("<x>1</x> <x>2</x>tail", stop=("</x>",),
                         stop_unless_followed_by=("<x>",))
    assert verdicts[-1] == "stop"
    assert CharTokenizer().decode(row.tokens) == "<x>1</x> <x>2</x>"  # look-ahead dropped


def test_without_a_continuation_the_look_ahead_is_dropped() -> None:
    text = "<x>1</x>" + "z" * (LOOK_AHEAD_TOKENS + 2)
    row, verdicts = feed(text, stop=("</x>",), stop_unless_followed_by=("<x>",))
    assert verdicts[-1] == "stop" and len(verdicts) == len("<x>1</x>") + 1
    assert generation(row, CharTokenizer()).text == "<x>1</x>"
