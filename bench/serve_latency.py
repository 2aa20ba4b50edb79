"""`arft serve` streams the first chunk of a tool call within 1 s, well before a whole non-streamed reply.

`arft serve` latency: how soon a client sees a tool call, streamed vs not, on the embedded model.

    python -m bench run serve_latency [--n 12] [--max-tokens 64] [--tool-choice required|auto]

Serves the embedded SmolLM2-135M (the `arft serve` app, uvicorn on 127.0.0.1) and sends the
calculator example's plain validation rows (a system prompt and the user's request) with the
calculator tool, through the official `openai` client, one request at a time. Each row is asked
twice, taking turns so that machine load hits both alike:

- **streamed**: time to the first chunk that carries the tool call (its id and name), and to the
  end of the stream;
- **not streamed** (the baseline): time to the whole reply.

Prints median, p95 and max of each, the ratio of the streamed first tool-call token to the whole
non-streamed reply, and the goal (first token of a tool call ≤ 1 s). Output also in
``bench/out/serve_latency/result.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any, Sequence

from arft.pyfile import load_file
from bench.lib.harness import OUT as BENCH_OUT
from bench.lib.harness import ROOT, record

QUICK = ["--n", "2", "--max-tokens", "32"]
OUT = BENCH_OUT / "serve_latency"
GOAL_S = 1.0


def rows(n: int) -> list[list[dict[str, Any]]]:
    lines = (ROOT / "examples" / "calculator" / "validation_plain.jsonl").read_text().splitlines()
    return [json.loads(line)["messages"] for line in lines[:n]]


def calculator_schema() -> dict[str, Any]:
    from arft.tools.python_fn import PythonTool

    tools = load_file(ROOT / "examples" / "calculator" / "tools.py", "calculator_tools")
    return PythonTool.from_function(tools.calculator).schema


def streamed(client: Any, messages: list[dict[str, Any]], kw: dict[str, Any]) -> tuple[float | None, float]:
    """(seconds to the first tool-call chunk or None, seconds to the end)."""
    start, first = time.perf_counter(), None
    for chunk in client.chat.completions.create(messages=messages, stream=True, **kw):
        if first is None and chunk.choices and chunk.choices[0].delta.tool_calls:
            first = time.perf_counter() - start
    return first, time.perf_counter() - start


def whole(client: Any, messages: list[dict[str, Any]], kw: dict[str, Any]) -> tuple[float, bool]:
    start = time.perf_counter()
    r = client.chat.completions.create(messages=messages, **kw)
    return time.perf_counter() - start, bool(r.choices[0].message.tool_calls)


def stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"median": statistics.median(xs), "p95": xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))],
            "max": xs[-1], "n": len(xs)}


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=12, help="rows asked (each twice: streamed and not)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--tool-choice", default="required", choices=["required", "auto"])
    args = p.parse_args(argv)

    import openai

    from arft.app.serve.models import served_models
    from arft.app.serve.server import build_app
    from arft.serving import serve

    print("loading the embedded model", flush=True)
    models = served_models("smollm2-135m-instruct")
    kw = {"model": models[0].name, "tools": [calculator_schema()], "tool_choice": args.tool_choice,
          "max_tokens": args.max_tokens, "temperature": 0.7}
    first, stream_end, plain, plain_calls, no_call = [], [], [], 0, 0
    with serve(build_app(models)) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        whole(client, rows(1)[0], kw)  # warm-up: the grammar compiles, the prompt's prefix is stored
        for i, messages in enumerate(rows(args.n)):
            order = (0, 1) if i % 2 == 0 else (1, 0)  # take turns going first
            for which in order:
                if which == 0:
                    f, end = streamed(client, messages, kw)
                    stream_end.append(end)
                    if f is None:
                        no_call += 1
                    else:
                        first.append(f)
                else:
                    t, called = whole(client, messages, kw)
                    plain.append(t)
                    plain_calls += called
            print(f"  row {i + 1}/{args.n}: streamed first call {first[-1] if first else float('nan'):.2f} s, "
                  f"whole reply {plain[-1]:.2f} s", flush=True)
    result = {"n": args.n, "tool_choice": args.tool_choice, "max_tokens": args.max_tokens,
              "stream_first_tool_call_s": stats(first) if first else None,
              "stream_end_s": stats(stream_end), "non_stream_s": stats(plain),
              "streams_without_call": no_call, "non_stream_replies_with_call": plain_calls}
    ratio = result["stream_first_tool_call_s"]["median"] / result["non_stream_s"]["median"] if first else None
    result["ratio_first_call_to_whole_reply"] = ratio
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "result.json").write_text(json.dumps(result, indent=2))
    print("\n| measure (embedded 135M, CPU) | median | p95 | max |\n|---|---|---|---|")
    for label, key in (("streamed: first tool-call chunk", "stream_first_tool_call_s"),
                       ("streamed: end of stream", "stream_end_s"), ("not streamed: whole reply", "non_stream_s")):
        s = result[key]
        if s:
            print(f"| {label} | {s['median']:.2f} s | {s['p95']:.2f} s | {s['max']:.2f} s |")
    if ratio is not None:
        met = "met" if result["stream_first_tool_call_s"]["p95"] <= GOAL_S else "NOT met"
        print(f"\nfirst tool-call token / whole reply (medians): {ratio:.2f}x; goal <= {GOAL_S:.0f} s at p95: {met}")
    print(f"streams without a call: {no_call}/{args.n}; non-streamed replies with a call: {plain_calls}/{args.n}")
    print("command: python -m bench " + " ".join(sys.argv[1:]))
    record("serve_latency", result)


if __name__ == "__main__":
    main()
