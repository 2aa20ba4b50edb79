"""An endpoint tool call costs within 1.2x the latency of a raw httpx POST of the same body to the same server.

Run: ``python -m bench run endpoint_latency [--n 400]``. A trivial endpoint runs on 127.0.0.1 (uvicorn
in a thread); the two clients take turns, call by call, so drift in machine load hits both alike.
Goal: EndpointTool's median within 1.2x of the raw POST's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from typing import Any, Sequence

import httpx
from fastapi import FastAPI, Request

from arft.config import EndpointToolSpec
from arft.tools.base import ToolContext
from arft.tools.endpoint import EndpointTool
from arft.serving import serve
from bench.lib.harness import record

QUICK = ["--n", "50", "--warmup", "10"]


def make_app() -> FastAPI:
    """An endpoint that answers every function_call at once."""
    app = FastAPI()

    @app.post("/tool")
    async def tool(request: Request) -> dict[str, Any]:
        body = await request.json()
        return {"type": "function_call_output", "call_id": body["call_id"], "id": body["id"],
                "output": "ok"}

    return app


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(url: str, n: int, warmup: int) -> tuple[list[float], list[float]]:
    """Seconds per call for EndpointTool and for a raw POST, interleaved."""
    spec = EndpointToolSpec(name="bench", server_url=url, headers={"Authorization": "Bearer x"})
    tool = EndpointTool(spec)
    ctx = ToolContext(trace_id="trace_" + uuid.uuid4().hex, call_id="call_1", item={"k": "v"})
    arguments = '{"q": "hello"}'
    body = json.dumps({"type": "function_call", "id": "fc_" + uuid.uuid4().hex,
                       "call_id": ctx.call_id, "name": spec.name, "arguments": arguments,
                       "trace_id": ctx.trace_id, "item": ctx.item}).encode()
    # The same client settings EndpointTool uses: keep-alive pool, headers, per-read timeout.
    raw = httpx.AsyncClient(headers={"content-type": "application/json", **spec.headers},
                            timeout=httpx.Timeout(spec.timeout_s),
                            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))

    async def via_tool() -> None:
        out = await tool.call(arguments, ctx)
        assert out.status == "ok", out

    async def via_raw() -> None:
        resp = await raw.post(url, content=body)
        assert resp.status_code == 200, resp.text

    tool_s: list[float] = []
    raw_s: list[float] = []
    try:
        for i in range(warmup + n):
            # Alternate which goes first so neither always follows the other's server work.
            order = [(via_tool, tool_s), (via_raw, raw_s)]
            for fn, sink in order if i % 2 == 0 else reversed(order):
                start = time.perf_counter()
                await fn()
                if i >= warmup:
                    sink.append(time.perf_counter() - start)
    finally:
        await tool.aclose()
        await raw.aclose()
    return tool_s, raw_s


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=400, help="measured calls of each kind")
    parser.add_argument("--warmup", type=int, default=50, help="unmeasured calls of each kind")
    args = parser.parse_args(argv)
    with serve(make_app()) as base:
        tool_s, raw_s = asyncio.run(measure(f"{base}/tool", args.n, args.warmup))
    print(f"{args.n} sequential calls each, interleaved, after {args.warmup} warm-up calls")
    for label, values in (("EndpointTool.call", tool_s), ("raw httpx post", raw_s)):
        print(f"  {label:18s} median {statistics.median(values) * 1e3:7.3f} ms   "
              f"p95 {percentile(values, 0.95) * 1e3:7.3f} ms")
    ratio = statistics.median(tool_s) / statistics.median(raw_s)
    p95_ratio = percentile(tool_s, 0.95) / percentile(raw_s, 0.95)
    verdict = "meets" if ratio <= 1.2 else "MISSES"
    print(f"  ratio EndpointTool/raw: median {ratio:.3f}x, p95 {p95_ratio:.3f}x "
          f"({verdict} the 1.2x goal)")
    record("endpoint_latency", {"calls": args.n, "tool_median_ms": statistics.median(tool_s) * 1e3,
                                "raw_median_ms": statistics.median(raw_s) * 1e3, "median_ratio": ratio,
                                "p95_ratio": p95_ratio})


if __name__ == "__main__":
    main()
