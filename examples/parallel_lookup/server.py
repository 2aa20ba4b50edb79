"""The parallel_lookup tool server: ``lookup(city)`` over HTTP, slow on purpose.

Each call sleeps a fixed delay (``--delay``, 0.3 s by default) before it answers, as a tool that
runs in a VM or calls a remote service would. Calls are served concurrently (the sleep is an
``asyncio.sleep``), so three calls made in one assistant turn take about one delay and three
calls made in three turns take three: the latency a parallel agent saves is real.

It speaks the hosted Agent RFT tool-endpoint contract: POST ``{"type": "function_call", "id",
"call_id", "name", "arguments": "<json string>", "trace_id", "item"}`` to ``/lookup`` and it
answers ``{"type": "function_call_output", "call_id", "id", "output"}``; an unknown city is a 404
whose body the model sees. The output is the office's code and, since every call carries its
task's ``item`` and its rollout's ``trace_id``, the task's offices this rollout has not looked up
yet (``still_missing``): a progress note that makes the slow path (one call a turn until nothing
is missing) easy for a small model, so what is left to learn is to make the calls at once.

    python server.py --port 8766 --delay 0.3    # serves http://127.0.0.1:8766/lookup

``GET /health`` names the service (``parallel_lookup``) and its delay; ``GET /stats`` counts the
calls served and the most that were ever in flight at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Collection, Sequence

from fastapi import FastAPI, HTTPException

from arft.pyfile import load_file

# The hosted contract's request body, as the finance_lookup example's server reads it.
FunctionCall = load_file(Path(__file__).resolve().parents[1] / "finance_lookup" / "server.py",
                         "finance_lookup_server").FunctionCall

DEFAULT_PORT = 8766
DEFAULT_DELAY_S = 0.3
SERVICE = "parallel_lookup"
MAX_TRACES = 10_000
"""Rollouts whose looked-up offices the server remembers (the most recent ones)."""
CITIES = (
    "Oslo", "Lima", "Cairo", "Dublin", "Madrid", "Vienna", "Prague", "Warsaw", "Berlin", "Rome",
    "Athens", "Lisbon", "Seoul", "Delhi", "Dakar", "Nairobi", "Accra", "Quito", "Bogota", "Havana",
    "Manila", "Hanoi", "Jakarta", "Sydney", "Perth", "Denver", "Boston", "Austin", "Chicago",
    "Toronto", "Montreal", "Zurich", "Geneva", "Munich", "Hamburg", "Milan", "Naples", "Porto",
    "Seville", "Valencia", "Riga", "Tallinn", "Vilnius", "Helsinki", "Stockholm", "Bergen",
    "Krakow", "Budapest")
"""The offices tasks ask about (48): make_data.py asks about the first 32 in training, the last 16
in validation."""
EXAMPLE_CITIES = ("Paris", "Tokyo", "London", "Kyoto", "Lagos")
"""Offices only the rows' worked examples look up; no task asks about them."""


def office_codes(seed: int = 20261203) -> dict[str, str]:
    """Each office's 4-digit door code: distinct, fixed by ``seed``."""
    offices = CITIES + EXAMPLE_CITIES
    codes = random.Random(seed).sample(range(1000, 10000), len(offices))
    return {city: str(code) for city, code in zip(offices, codes)}


def canonical(codes: dict[str, str], city: str) -> str:
    """The office's name as listed (any case, spaces ignored); KeyError for an unknown city."""
    key = {c.lower(): c for c in codes}.get(city.strip().lower())
    if key is None:
        raise KeyError(city)
    return key


def lookup(codes: dict[str, str], city: str, wanted: Sequence[str] = (), found: Collection[str] = ()) -> str:
    """The tool's output for ``city`` (KeyError for an unknown one). With the task's cities
    (``wanted``, from the call's ``item``) it also lists those still missing: neither ``city`` nor
    one the rollout already looked up (``found``, its calls so far, this turn's included)."""
    key = canonical(codes, city)
    out: dict[str, Any] = {"city": key, "door_code": codes[key]}
    if wanted:
        out["still_missing"] = [c for c in wanted if c != key and c not in found]
    return json.dumps(out)


def requested_city(codes: dict[str, str], arguments: str) -> str:
    """The office a call names; HTTPException 400 (bad arguments) or 404 (unknown city)."""
    try:
        city = json.loads(arguments or "{}")["city"]
    except (ValueError, TypeError, KeyError):
        raise HTTPException(400, 'lookup needs a JSON object {"city": "<name>"}') from None
    try:
        return canonical(codes, str(city))
    except KeyError:
        raise HTTPException(404, f"no office in {city!r}; look up one city per call") from None


def create_app(delay_s: float = DEFAULT_DELAY_S) -> FastAPI:
    """The app: POST /lookup (hosted contract, ``delay_s`` per call), GET /health, GET /stats."""
    codes = office_codes()
    stats = {"calls": 0, "in_flight": 0, "max_in_flight": 0}
    found: OrderedDict[str, set[str]] = OrderedDict()  # trace_id -> offices looked up (recent rollouts)
    app = FastAPI(title="parallel_lookup tools")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"ok": True, "service": SERVICE, "delay_s": delay_s, "offices": len(codes)}

    @app.get("/stats")
    async def get_stats() -> dict[str, int]:
        return dict(stats)

    def register(trace_id: str, city: str) -> set[str]:
        """The rollout's looked-up offices, ``city`` added (before the sleep: a turn's calls
        overlap, so each of them sees the others)."""
        seen = found.setdefault(trace_id, set())
        seen.add(city)
        found.move_to_end(trace_id)
        if len(found) > MAX_TRACES:
            found.popitem(last=False)
        return seen

    @app.post("/lookup")
    async def call(body: FunctionCall) -> dict[str, Any]:
        stats["calls"] += 1
        stats["in_flight"] += 1
        stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
        error: HTTPException | None = None
        seen: set[str] = set()
        try:
            city = requested_city(codes, body.arguments)
            seen = register(body.trace_id or "", city)
        except HTTPException as e:
            error = e
        try:
            await asyncio.sleep(delay_s)  # the VM's round trip: concurrent calls overlap
        finally:
            stats["in_flight"] -= 1
        if error is not None:
            raise error
        wanted = [str(c) for c in (body.item or {}).get("cities") or ()]
        output = lookup(codes, city, wanted, seen)
        return {"type": "function_call_output", "call_id": body.call_id, "id": body.id, "output": output}

    return app


def main() -> None:
    p = argparse.ArgumentParser(description="Serve the parallel_lookup tool on 127.0.0.1.")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--delay", type=float, default=DEFAULT_DELAY_S, help="seconds each call sleeps")
    args = p.parse_args()
    from arft.serving import serve

    with serve(create_app(args.delay), args.port, name=f"the {SERVICE} server") as url:
        print(f"{SERVICE}: {url}/lookup ({args.delay:g} s a call); Ctrl-C stops it", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
