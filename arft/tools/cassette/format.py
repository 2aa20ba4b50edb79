"""The cassette file: JSON lines a person can read and diff, one per tool call.

Two kinds of line, each a JSON object::

    {"type": "tools", "tools": [{"name", "schema"}], "servers": [{"name", "serves"}],
     "needs_workspace": false}
    {"type": "call", "tool": "lookup", "args": {"city": "Oslo"}, "output": "...", "status": "ok",
     "error": null, "http_status": 200, "latency_s": 0.31, "trace_id": "trace_...", "run_id":
     "train", "step": 3, "task_id": "t7", "sample_index": 1, "turn": 0, "call_index": 0,
     "files": [...], "files_error": null}

A ``tools`` line is written each time a run opens its tools: it is what a replay shows the
model and checks the tasks against (an MCP server's listing among them) without starting
anything. ``args`` holds the call's arguments parsed (a text that is not JSON stays a string);
the matching key is their canonical JSON (sorted keys, no spaces). Secrets are scrubbed as the
run's logs are (``arft.secrets.scrub``): every value a ``${ENV_VAR}`` reference of the job
resolved to becomes ``***`` in the arguments, the output and the error (the arguments of a
replayed call are scrubbed the same way before matching, so they still match).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from pydantic import BaseModel, ConfigDict, ValidationError

from arft.config.cassette import CASSETTE_FILE
from arft.errors import ArftError
from arft.secrets import scrub
from arft.tools.cassette.files import FileChange


class CassetteError(ArftError):
    """A cassette that cannot be read or written; the message names the file (and line)."""


class CallRecord(BaseModel):
    """One recorded tool call: what was asked, what came back, and where in the run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["call"] = "call"
    tool: str
    args: Any
    output: str
    status: Literal["ok", "tool_error", "infra_error"] = "ok"
    error: str | None = None
    http_status: int | None = None
    latency_s: float = 0.0
    trace_id: str = ""
    run_id: str = ""
    step: int | None = None
    task_id: str = ""
    sample_index: int = 0
    turn: int = 0
    call_index: int = 0
    """The call's place among its rollout's calls (0, 1, ...), in the order they started."""
    files: list[FileChange] = []
    files_error: str | None = None
    """Why the call's workspace changes are not all recorded (a file over the size cap)."""

    @property
    def key(self) -> str:
        return canonical(self.args)


class ServerEntry(BaseModel):
    """A ``serves`` entry: its label and the pattern of the names it answers."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    serves: str


class Listing(BaseModel):
    """The tools a run opened: their names and schemas, the ``serves`` servers' patterns."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["tools"] = "tools"
    tools: list[dict[str, Any]] = []
    """``{"name", "schema"}`` of every declared tool (the completions-format schema)."""
    servers: list[ServerEntry] = []
    needs_workspace: bool = False


@dataclass
class Recording:
    """A cassette read back: its calls in file order and the union of its tool listings."""

    path: Path
    calls: list[CallRecord] = field(default_factory=list)
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Tool name -> its schema."""
    servers: dict[str, ServerEntry] = field(default_factory=dict)
    needs_workspace: bool = False


def cassette_file(path: str | Path, base_dir: Path) -> Path:
    """The cassette ``path`` names (relative to ``base_dir``): a folder means its cassette.jsonl."""
    p = Path(path).expanduser()
    p = p if p.is_absolute() else (base_dir / p).resolve()
    return p / CASSETTE_FILE if p.is_dir() or not p.suffix else p


def parsed_args(arguments: str, secrets: Iterable[str]) -> Any:
    """The arguments as stored: parsed JSON (a non-JSON text stays a string), secrets redacted."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        value = arguments
    return json.loads(canonical(scrubbed(value, frozenset(secrets))))  # stored with sorted keys


def scrubbed(value: Any, secrets: frozenset[str]) -> Any:
    """``value`` (JSON data) with every secret value scrubbed from every string (``arft.secrets
    .scrub``). Keys are not masked by their name as a job's are: a tool's ``key`` or ``token``
    argument is data the matching needs, and a secret in it is scrubbed by value anyway."""
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, dict):
        return {k: scrubbed(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [scrubbed(v, secrets) for v in value]
    return value


def canonical(args: Any) -> str:
    """The matching key of stored arguments: JSON with sorted keys and no spaces."""
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def scope(run_id: str) -> str:
    """The role of a run in the matching rule, stable across runs: ``train`` for a training run's
    rollouts, the part after ``:`` for its evaluations and rescues (``eval-000003``, ``rescue``),
    and ``eval`` for an ``arft eval`` run (whose run id is its folder's name, which a replay of it
    does not share)."""
    if run_id in ("train", "sft"):
        return run_id
    return run_id.split(":", 1)[1] if ":" in run_id else "eval"


def read_cassette(path: Path) -> Recording:
    """Every line of the cassette at ``path``; ``CassetteError`` naming the line that is not one."""
    if not path.is_file():
        raise CassetteError(f"no cassette at {path}: record one first (arft eval JOB --record DIR, "
                            "or rollout.tool_cassette: record) and point --replay at that folder")
    rec = Recording(path)
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                _add_line(rec, line, f"{path}:{n}")
    return rec


def _add_line(rec: Recording, line: str, where: str) -> None:
    try:
        data = json.loads(line)
        if data.get("type") == "tools":
            listing = Listing.model_validate(data)
            rec.tools.update({str(t["name"]): dict(t["schema"]) for t in listing.tools})
            rec.servers.update({s.name: s for s in listing.servers})
            rec.needs_workspace = rec.needs_workspace or listing.needs_workspace
        else:
            rec.calls.append(CallRecord.model_validate(data))
    except (json.JSONDecodeError, ValidationError, TypeError, KeyError, AttributeError) as e:
        raise CassetteError(f"{where}: not a cassette line ({str(e).splitlines()[0]}); a cassette "
                            "is written by arft (rollout.tool_cassette: record)") from None


class CassetteWriter:
    """Appends lines to one cassette file. The only writer of its file in the run: lines are
    written whole, one ``write`` each, from the event loop's thread, so concurrent rollouts
    never interleave within a line."""

    def __init__(self, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file: TextIO | None = path.open("a", encoding="utf-8")
        except OSError as e:
            raise CassetteError(f"cannot write the cassette {path}: {e}") from None
        self.path = path

    def write(self, line: CallRecord | Listing) -> None:
        if self._file is None:
            return
        # Not sort_keys: a schema's key order is what the model is shown (arguments come sorted).
        self._file.write(json.dumps(line.model_dump(mode="json"), ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
