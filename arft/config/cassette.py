"""``rollout.tool_cassette``: record every tool call of a run, or answer them from a recording.

The short form is the mode alone (``tool_cassette: record``); the object form sets the rest
(``tool_cassette: {mode: replay, path: runs/a, miss: live}``). What is recorded, the matching
rule and the limits are in docs/replay.md; the cassette itself is ``arft.tools.cassette``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import PositiveInt, model_validator

from arft.config.base import Spec

CASSETTE_FILE = "cassette.jsonl"
"""The file a cassette folder holds (a ``path`` that is a folder means this file in it)."""


class ToolCassetteSpec(Spec):
    """Tool cassettes: ``off`` (default), ``record`` (every tool call appended to ``path``) or
    ``replay`` (every tool call answered from ``path``; the tools are never called)."""

    mode: Literal["off", "record", "replay"] = "off"
    """``off``: tools run as usual. ``record``: tools run and every call (arguments, output,
    status, latency, the files it changed in the workspace) is appended to ``path``. ``replay``:
    no tool runs (MCP servers are not started); each call is answered from ``path``."""
    path: str | None = None
    """The cassette: a ``.jsonl`` file, or a folder holding ``cassette.jsonl`` (a run directory
    recorded into works). Relative to the job file's folder. Default for ``record``: the run
    directory's ``cassette.jsonl``; ``replay`` needs it."""
    miss: Literal["fail", "live"] = "fail"
    """A replayed call with no recording: ``fail`` answers it as an infrastructure error (the
    rollout is ``infra_failed``, left out of the loss and counted as a ``cassette miss``);
    ``live`` calls the real tool (which must then be up), counted as a live fallback."""
    latency: Literal["zero", "recorded"] = "zero"
    """Replayed calls answer at once (``zero``) or after the latency they had when recorded."""
    record_path: str | None = None
    """With ``replay`` and ``miss: live``: append the live calls to this cassette too (a file or
    folder, as ``path``)."""
    max_file_bytes: PositiveInt = 1_000_000
    """Largest workspace file a recorded call may create or change; a bigger one is not
    recorded, and replaying that call is a cassette miss that says so."""

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        """``tool_cassette: record`` is ``{mode: record}``."""
        return {"mode": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _needs_path(self) -> "ToolCassetteSpec":
        if self.mode == "replay" and not self.path:
            raise ValueError("tool_cassette replay needs a path: the cassette file or folder a "
                             "recorded run wrote (e.g. {mode: replay, path: runs/my-eval})")
        return self
