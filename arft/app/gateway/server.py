"""The gateway: an OpenAI-compatible server in front of the policy engine, one route per rollout.

An agent program is given ``{url}/rollouts/{trace_id}/v1`` as its base URL, so its own client
(openai, the Agents SDK's default Responses model, LangChain, litellm) needs no change. Each
request on that route (``chat/completions`` or ``responses``) is answered by ``arft serve``'s own
handlers (the run's chat format, constrained calls, streaming, disconnects, OpenAI-shaped
errors), with three differences for training:

* the prompt ids come from the rollout's ``Capture`` (append-only turns reuse the sampled ids);
* sampling is the job's (``sampling``: temperature, top_p, top_k, the per-turn seed): what the
  agent asks for is overridden, so the logprobs are those the trainer assumes; ``max_tokens`` is
  clamped to ``sampling.max_new_tokens`` and to what is left of ``rollout.max_tokens``;
* any ``model`` name is accepted (the route decides the policy), ``n`` must be 1 (a rollout is one
  trajectory), and a prompt over ``rollout.max_tokens`` is a 400 that ends the rollout as
  truncated.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Iterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from arft.app.gateway.capture import Capture
from arft.app.serve.chat import ChatRequest, ChatRequestError, Prepared, ServedModel
from arft.app.serve.access import AccessLog
from arft.app.serve.server import Preparer, _chat, error, openai_errors, prepared
from arft.engines.base import Generation, SamplingParams
from arft.records import Message
from arft.seeds import turn_seed
from arft.serving import serve_here
from arft.telemetry import NO_TELEMETRY, Telemetry


@dataclass
class Route:
    """One running rollout: its capture and the seed of its sampling."""

    capture: Capture
    seed: int | None
    requests: int = 0


@dataclass
class Gateway:
    """The routes of the rollouts that run now, over one policy engine (``model``)."""

    model: ServedModel
    params: SamplingParams
    """The job's sampling (``SamplingParams.from_spec(job.sampling)``)."""
    max_tokens: int
    """``rollout.max_tokens``: the whole trajectory's token budget (one segment's)."""
    telemetry: Telemetry = NO_TELEMETRY
    """Where each model turn's span goes: into its rollout's trace (``logging.opentelemetry``)."""
    routes: dict[str, Route] = field(default_factory=dict)
    url: str = ""
    _pool: ThreadPoolExecutor | None = field(default=None, repr=False)
    """Where requests are prepared: a pool of the gateway's own, because agent programs in this
    process may fill the loop's default executor with calls that wait on the gateway."""

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Gateway]:
        """Serve on a free port of 127.0.0.1 until the block ends."""
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="arft-gateway")
        try:
            async with serve_here(self.app(), name="the arft gateway") as url:
                self.url = url
                yield self
        finally:
            self.url = ""
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def base_url(self, trace_id: str) -> str:
        """The OpenAI base URL an agent program uses for rollout ``trace_id``."""
        return f"{self.url}/rollouts/{trace_id}/v1"

    def open(self, trace_id: str, seed: int | None) -> Route:
        """Start recording rollout ``trace_id`` (until ``close``)."""
        route = Route(Capture(self.model.fmt, trace_id), seed)
        self.routes[trace_id] = route
        return route

    def close(self, trace_id: str) -> None:
        self.routes.pop(trace_id, None)

    def app(self) -> FastAPI:
        """The routes: chat completions and the Responses API, answered by ``arft serve``'s own
        handlers with this gateway's preparer; ``models``; ``health``."""
        from arft.app.serve.responses import respond  # beside server: it builds on server's `error`

        app = FastAPI(title="arft gateway", docs_url=None, redoc_url=None)
        app.add_middleware(AccessLog)  # a line per model call, with its rollout's trace id
        openai_errors(app)
        names = AnyName(self.model)

        @app.get("/health")
        async def health() -> dict[str, str]:
            return {"status": "ok"}

        @app.get("/rollouts/{trace_id}/v1/models")
        async def models(trace_id: str) -> dict[str, Any]:
            return {"object": "list", "data": [{"id": self.model.name, "object": "model", "created": 0,
                                                "owned_by": "arft"}]}

        @app.post("/rollouts/{trace_id}/v1/chat/completions")
        async def chat(trace_id: str, request: Request) -> Any:
            route = self._route(trace_id)
            return route if isinstance(route, JSONResponse) else await _chat(request, names, self.preparer(route))

        @app.post("/rollouts/{trace_id}/v1/responses")
        async def responses(trace_id: str, request: Request) -> Any:
            route = self._route(trace_id)
            return route if isinstance(route, JSONResponse) else await respond(request, names, self.preparer(route))

        return app

    def _route(self, trace_id: str) -> Route | JSONResponse:
        route = self.routes.get(trace_id)
        if route is None:
            return error(404, f"no rollout {trace_id!r} is running on this gateway: use the base URL "
                         "arft gave the agent (OPENAI_BASE_URL)", code="rollout_not_found")
        route.requests += 1
        return route

    def preparer(self, route: Route) -> Preparer:
        """``arft serve``'s preparation, then the rollout's captured ids and the job's sampling."""

        async def prepare(request: Request, model: ServedModel, req: ChatRequest) -> Prepared:
            if req.n != 1:
                raise ChatRequestError("a rollout is one trajectory: the gateway samples n=1 (send n "
                                       "requests for n answers)", "n")
            req = req.model_copy(update={"max_tokens": None, "max_completion_tokens": None})
            prep = self.turn(route, await prepared(request, model, req, self._pool))
            request.state.prep = prep  # what the access log counts
            return prep

        return prepare

    def turn(self, route: Route, prep: Prepared) -> Prepared:
        """``prep`` rendered from the rollout's captured ids, sampled as the job samples."""
        capture = route.capture
        turn = capture.prompt(prep.messages, prep.tools, prep.choice, prep.rendered)
        room = self.max_tokens - len(turn.rendered.ids)
        if room <= 0:
            capture.overflow = True
            raise ChatRequestError(
                f"the conversation is {len(turn.rendered.ids)} tokens, at or over this rollout's budget of "
                f"{self.max_tokens} (rollout.max_tokens): the rollout ends here", "messages",
                code="context_length_exceeded")
        params = prep.params.model_copy(update={
            "temperature": self.params.temperature, "top_p": self.params.top_p, "top_k": self.params.top_k,
            "seed": None if route.seed is None else turn_seed(route.seed, capture.turns),
            "max_new_tokens": min(self.params.max_new_tokens, room)})
        return dataclasses.replace(prep, rendered=turn.rendered, params=params,
                                   on_reply=self._on_reply(route, len(turn.rendered.ids)))

    def _on_reply(self, route: Route, n_prompt: int) -> Callable[[Generation, Message], None]:
        """What a sampled reply goes to: the rollout's capture and, with telemetry on, a model
        turn span in the rollout's trace (the request runs in the web server's task, so the span
        is parented to the rollout explicitly, by its trace id)."""
        capture = route.capture
        if not self.telemetry.enabled:
            return capture.record
        trace, start_ns, turn = self.telemetry.rollout_of(capture.trace_id), time.time_ns(), capture.turns

        def record(gen: Generation, reply: Message) -> None:
            capture.record(gen, reply)
            trace.model_turn_at(start_ns, turn, reply, gen.finish_reason, n_prompt, len(gen.token_ids))

        return record


class AnyName(Mapping[str, ServedModel]):
    """Every model name maps to the policy: an agent's own model name (``gpt-4o``) needs no change,
    the route decides what samples."""

    def __init__(self, model: ServedModel) -> None:
        self.model = model

    def __getitem__(self, name: str) -> ServedModel:
        return self.model

    def __iter__(self) -> Iterator[str]:
        return iter([self.model.name])

    def __len__(self) -> int:
        return 1
