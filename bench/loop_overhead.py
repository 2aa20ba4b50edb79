"""The rollout loop itself runs over 1,000 three-turn rollouts a second on 2 cores (stub engine, in-process tools).

Loop overhead: three-turn rollouts/s with a stub engine and in-process tools.

Measures everything the rollout loop itself costs — rendering the prompt, appending tool-result
tokens, parsing calls, running tools, building the Rollout — with generation replaced by the
scripted engine (no model). Side by side in one run: the token-level path (real SmolLM2 tokenizer
and ChatFormat: what training uses) and the chat-level path (what the openai engine uses).
Goal: >= 1,000 three-turn rollouts/s on 2 cores.

    python -m bench run loop_overhead [--n 2000] [--concurrency 256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any, Sequence


from arft.config import RolloutSpec, SamplingSpec
from arft.engines.base import ChatReply, SamplingParams
from arft.engines.scripted import ScriptedEngine
from arft.chat.formats import ChatFormat
from arft.models.loading import load_tokenizer
from arft.records import FunctionCall, Message, Task, ToolCall
from arft.rollout.conversation import ChatConversation, TokenConversation
from arft.rollout.loop import RolloutLimits, run_rollout
from arft.tools.python_fn import PythonTool
from bench.lib.harness import record

QUICK = ["--n", "300", "--concurrency", "64"]

GOAL = 1000.0


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def call_text(a: int, b: int) -> str:
    return "<tool_call>\n" + json.dumps({"name": "add", "arguments": {"a": a, "b": b}}) + "\n</tool_call>"


class ScriptedChat:
    """Chat-level stub: call, call, answer — decided by how many tool messages came back."""

    async def chat(self, messages: Sequence[Message], tools: Any, tool_choice: Any,
                   params: SamplingParams) -> ChatReply:
        n = sum(1 for m in messages if m.role == "tool")
        if n < 2:
            msg = Message(role="assistant", tool_calls=(ToolCall(id=f"call_{n}", function=FunctionCall(
                name="add", arguments=json.dumps({"a": n, "b": 1}))),))
            return ChatReply(message=msg, finish_reason="tool_calls")
        return ChatReply(message=Message(role="assistant", content="The sum is 3."), finish_reason="stop")

    async def aclose(self) -> None:
        return None


async def run(kind: str, n: int, concurrency: int, tokenizer: Any) -> float:
    tools = {"add": PythonTool.from_function(add)}
    task = Task(id="t", messages=(Message(role="system", content="You add numbers."),
                                  Message(role="user", content="What is 1 + 2 + 3?")))
    fmt = ChatFormat(tokenizer)
    replies = [call_text(1, 2), call_text(3, 3), "The sum is 6.<|im_end|>"]

    gate = asyncio.Semaphore(concurrency)
    params = SamplingParams.from_spec(SamplingSpec(max_new_tokens=64))

    async def one() -> None:
        async with gate:
            if kind == "token":
                it = iter(replies)
                engine = ScriptedEngine(tokenizer, lambda _ids: next(it))
                conv: Any = TokenConversation(engine, fmt, params, max_tokens=4096)
            else:
                conv = ChatConversation(ScriptedChat(), params, max_tokens=4096)
            r = await run_rollout(conv, task, tools, RolloutLimits.from_spec(RolloutSpec(), max_episode_steps=10))
            assert r.n_turns == 3 and len(r.tool_calls) == 2 and r.status == "ok", r

    await asyncio.gather(*(one() for _ in range(min(n, 50))))  # warm-up (tokenizer caches etc.)
    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return n / (time.perf_counter() - start)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=256)
    args = ap.parse_args(argv)
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    results = {}
    for kind in ("token", "chat", "token", "chat"):  # interleaved, best of two
        rate = asyncio.run(run(kind, args.n, args.concurrency, tokenizer))
        results[kind] = max(results.get(kind, 0.0), rate)
    print(f"{args.n} three-turn rollouts (2 tool calls each), concurrency {args.concurrency}, best of 2")
    for kind, rate in results.items():
        print(f"  {kind:5s}-level loop: {rate:8.0f} rollouts/s   ratio to the {GOAL:.0f}/s goal: {rate / GOAL:.2f}x")
    print(f"  token/chat ratio: {results['token'] / results['chat']:.2f}x (cost of keeping exact token ids)")
    record("loop_overhead", {"rollouts_per_s": results, "goal_per_s": GOAL, "n": args.n,
                             "concurrency": args.concurrency})


if __name__ == "__main__":
    main()
