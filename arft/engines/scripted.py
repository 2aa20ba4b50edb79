"""A scripted ``TokenEngine``: replays given assistant texts as token ids.

For testing tools, graders and the rollout loop without a model, and for measuring the loop's
own overhead. Each reply is tokenized once; its logprobs are 0.0 (it was not sampled).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from arft.engines.base import Generation, SamplingParams

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class ScriptedEngine:
    """Answers the n-th ``generate`` call of a conversation with ``replies(prompt_ids)``.

    ``replies`` gets the prompt ids and returns the assistant text to emit; end it with the
    tokenizer's eos text (e.g. ``<|im_end|>``) to finish the turn with ``eos``, or with a stop
    string to finish with ``stop``.
    """

    def __init__(self, tokenizer: "PreTrainedTokenizerBase", replies: Callable[[Sequence[int]], str]) -> None:
        self.tokenizer = tokenizer
        self._replies = replies
        self._cache: dict[str, list[int]] = {}
        self.calls = 0

    supports_streaming = True

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams,
                       on_tokens: Callable[[tuple[int, ...]], None] | None = None) -> Generation:
        """The next reply; ``on_tokens`` (streaming) gets its ids one token at a time."""
        self.calls += 1
        text = self._replies(prompt_ids)
        ids = self._cache.get(text)
        if ids is None:
            ids = self._cache[text] = self.tokenizer.encode(text, add_special_tokens=False)
        finish = "length"
        if len(ids) > params.max_new_tokens:
            ids = ids[: params.max_new_tokens]
            text = str(self.tokenizer.decode(ids))
        elif ids and ids[-1] == self.tokenizer.eos_token_id:
            finish = "eos"
        elif any(text.endswith(s) for s in params.stop):
            finish = "stop"
        if on_tokens is not None:
            for token in ids:
                on_tokens((token,))
        return Generation(token_ids=tuple(ids), logprobs=(0.0,) * len(ids), text=text,
                          finish_reason=finish)

    async def aclose(self) -> None:
        return None
