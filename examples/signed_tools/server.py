"""The signed_tools server: a tool endpoint and a grader endpoint that answer only requests arft
signed, refusing unsigned, tampered, stale and replayed ones with 401.

arft signs each request of an endpoint tool or grader whose spec has ``signing_secret`` with an
``arft-signature: t=<unix>,v1=<hex HMAC-SHA256 of "<t>." + body>`` header (``arft.signing``).
This server checks it on the raw body before parsing anything, remembers every signature it
accepted for ``max_age_s`` (a request sent twice is refused the second time), and, when given a
token, also wants ``Authorization: Bearer <token>``.

    export TOOL_SIGNING_SECRET=$(python -c "import secrets; print(secrets.token_hex(32))")
    export TOOL_TOKEN=$(python -c "import secrets; print(secrets.token_hex(16))")
    python server.py --port 8766      # POST /lookup (tool), POST /grade (grader), GET /health

``POST /lookup`` speaks the hosted tool contract (``{"type": "function_call", "arguments":
"{\\"name\\": ...}", ...}`` -> ``function_call_output``): the access code of a team member.
``POST /grade`` is the hosted endpoint grader: 1.0 when the answer contains the task's code.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request

from arft.signing import DEFAULT_MAX_AGE_S, SIGNATURE_HEADER, ReplayCache, SignatureError, verify_request

DEFAULT_PORT = 8766
"""The port job.yaml's URLs name."""
CODES = {"ada": "A-7731", "grace": "G-1906", "alan": "T-1912", "edsger": "D-1930",
         "barbara": "L-1939", "donald": "K-1938"}
"""The team's access codes: what the ``lookup`` tool serves."""


def create_app(signing_secret: str, token: str | None = None,
               max_age_s: float = DEFAULT_MAX_AGE_S) -> FastAPI:
    """The server: every POST must carry a valid, fresh, unseen ``arft-signature`` (and, with
    ``token``, ``Authorization: Bearer <token>``), else 401 with the reason."""
    if not signing_secret:
        raise ValueError("the signing secret is empty; set TOOL_SIGNING_SECRET to the value of "
                         "the job's signing_secret")
    app = FastAPI(title="signed_tools")
    seen = ReplayCache(max_age_s)

    async def signed_json(request: Request) -> dict[str, Any]:
        """The request's JSON body, once its signature (over the raw bytes) checks out."""
        raw = await request.body()
        try:
            verify_request(raw, request.headers.get(SIGNATURE_HEADER), signing_secret,
                           max_age_s=max_age_s, replay_cache=seen)
        except SignatureError as e:
            raise HTTPException(401, str(e)) from None
        if token is not None and not hmac.compare_digest(
                request.headers.get("authorization", "").encode(), f"Bearer {token}".encode()):
            raise HTTPException(401, "missing or wrong bearer token")
        try:
            body = json.loads(raw)
        except ValueError:
            raise HTTPException(400, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise HTTPException(400, "the body is not a JSON object")
        return body

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"service": "signed_tools"}

    @app.post("/lookup")
    def lookup(body: dict[str, Any] = Depends(signed_json)) -> dict[str, Any]:
        try:
            name = str(json.loads(body.get("arguments") or "{}").get("name", "")).strip().lower()
        except (ValueError, AttributeError):
            raise HTTPException(400, 'arguments must be a JSON object like {"name": "ada"}') from None
        if name not in CODES:
            raise HTTPException(404, f"no team member {name!r}; known: {', '.join(sorted(CODES))}")
        return {"type": "function_call_output", "call_id": body.get("call_id"), "id": body.get("id"),
                "output": CODES[name]}

    @app.post("/grade")
    def grade(body: dict[str, Any] = Depends(signed_json)) -> dict[str, Any]:
        answer = str((body.get("item") or {}).get("answer", ""))
        text = str((body.get("sample") or {}).get("output_text", ""))
        return {"score": 1.0 if answer and answer in text else 0.0}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args()
    secret = os.environ.get("TOOL_SIGNING_SECRET", "")
    if not secret:
        raise SystemExit("set TOOL_SIGNING_SECRET (the same value arft resolves the job's "
                         "signing_secret from), then start the server again")
    import uvicorn

    uvicorn.run(create_app(secret, os.environ.get("TOOL_TOKEN") or None), host="127.0.0.1",
                port=args.port)


if __name__ == "__main__":
    main()
