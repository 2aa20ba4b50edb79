"""The fuzz targets: each runs one generated input through real arft code and says how it ended.

The rule every target holds: an input ends in success or in the arft error type its layer
documents, with a message (a *named* error) — never in any other exception, and never in a hang
(``time_limit``). ``Target.check`` returns ``None`` for a success and the message of a named
error, and raises anything else: the fuzz tests let it fail the test, ``python -m bench run fuzz`` counts it.

``open_targets`` builds every target over one scratch folder and one tool server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from arft.config import EndpointToolSpec, GraderSpec, Hyperparameters, JobError, JobSpec, load_job
from arft.data.checks import split_drift, split_overlap
from arft.data.dataset import DatasetError, check_task_tools, load_tasks
from arft.data.importer import TrafficImportError, import_traffic
from arft.data.redact import build_redactor
from arft.data.traffic import parse_item_paths, read_traffic, traffic_tasks
from arft.errors import ArftError
from arft.graders.base import GraderError, close_grader
from arft.graders.registry import build_grader
from arft.graders.validate import validate_grader
from arft.http import BadAnswer, json_object, server_message
from arft.chat.toolcalls import ParsedTurn, parse_tool_calls
from arft.serving import serve
from arft.tools.base import ToolContext, ToolOutcome
from arft.tools.endpoint import EndpointTool, _output
from bench.lib.fuzz import inputs
from bench.lib.fuzz.examples import TOOL_NAMES

Outcome = str | None
"""``None``: the input succeeded; a string: the message of the named error it ended in."""
HANG_CPU_S = 20.0
"""CPU seconds one input may use before it counts as a hang (the slowest, a deeply nested YAML
job, takes about 5). CPU time, not wall time: a busy machine must not make a slow input a hang."""
HANG_WALL_S = 120.0
"""Wall-clock seconds before an input that waits without computing counts as a hang."""
GRADER_SOURCE = "def grade(sample, item):\n    return 1.0\n"
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]
"""What the tool server answers: status, headers, body."""


class Hang(BaseException):
    """An input that did not finish in time (a BaseException, so that no ``except Exception``
    in the code under test can swallow it)."""


@contextmanager
def time_limit(cpu_s: float, wall_s: float) -> Iterator[None]:
    """Raise ``Hang`` in the main thread when the block uses ``cpu_s`` CPU seconds (the process's,
    all threads) or runs ``wall_s`` seconds."""

    def on_timer(signum: int, frame: Any) -> None:
        what = f"{cpu_s:g} CPU seconds" if signum == signal.SIGPROF else f"{wall_s:g} s"
        raise Hang(f"no result within {what}")

    timers = ((signal.SIGPROF, signal.ITIMER_PROF, cpu_s), (signal.SIGALRM, signal.ITIMER_REAL, wall_s))
    previous = [signal.signal(sig, on_timer) for sig, _, _ in timers]
    for _, timer, seconds in timers:
        signal.setitimer(timer, seconds)
    try:
        yield
    finally:
        for (sig, timer, _), handler in zip(timers, previous):
            signal.setitimer(timer, 0)
            signal.signal(sig, handler)


def named(error: BaseException) -> str:
    """A documented error's message: it must say what is wrong."""
    message = str(error).strip()
    assert message, f"{type(error).__name__} raised without a message"
    return message


@dataclass(frozen=True, repr=False)
class Target:
    """One fuzz target: its inputs and the code that runs one of them."""

    name: str
    description: str
    strategy: st.SearchStrategy[Any]
    run: Callable[[Any], Outcome]

    def __repr__(self) -> str:  # short: Hypothesis prints it with every failing example
        return f"Target({self.name!r})"

    def check(self, value: Any) -> Outcome:
        """Run ``value``: ``None`` or a named error's message, or raise (unhandled, ``Hang``)."""
        with time_limit(HANG_CPU_S, HANG_WALL_S):
            return self.run(value)


class _Runner:
    """The targets' shared state: a scratch folder, an event loop and the tool server's slot."""

    def __init__(self, root: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.root = root
        self.loop = loop
        self.base = root / "base"  # a job folder: what near-valid specs name exists there
        (self.base / "tests").mkdir(parents=True, exist_ok=True)
        (self.base / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
        (self.base / "grader.py").write_text(GRADER_SOURCE)
        self.answer: Answer = (200, [], b"{}")
        self.tool: EndpointTool | None = None  # set once the tool server runs
        self.grader_adapter: TypeAdapter[Any] = TypeAdapter(GraderSpec)
        self.job_outcomes: dict[tuple[str, bytes], Outcome] = {}
        self.job = JobSpec.model_validate({"method": {"type": "reinforcement", "reinforcement": {
            "grader": {"type": "string_check", "input": "a", "reference": "a", "operation": "eq"},
            "tools": [{"name": "lookup_order", "server_url": "http://127.0.0.1:9/x"},
                      {"type": "mcp", "command": ["x"], "name_prefix": "mcp_"}]}}})

    # -- dataset rows ----------------------------------------------------------------------

    def dataset(self, content: bytes) -> Outcome:
        path = self.root / "rows.jsonl"
        path.write_bytes(content)
        try:
            tasks = load_tasks(path)
        except DatasetError as e:
            return named(e)
        assert tasks and all(t.messages for t in tasks)
        # The doctor's checks of loaded rows: overlap and drift never raise for them.
        assert split_overlap(tasks, tasks).n_b == len(tasks)
        assert split_drift(tasks, tasks, "train", "validation").n_a == len(tasks)
        try:
            check_task_tools(tasks, set(TOOL_NAMES), path)
        except DatasetError as e:
            return named(e)
        return None

    # -- job specs -------------------------------------------------------------------------

    def job_file(self, value: tuple[str, bytes]) -> Outcome:
        """A job file's outcome; the same big file again gets the outcome it got (a deeply
        nested file takes PyYAML seconds, and there are only a few of them)."""
        if len(value[1]) < 4096:
            return self._job_file(value)
        if value not in self.job_outcomes:
            self.job_outcomes[value] = self._job_file(value)
        return self.job_outcomes[value]

    def _job_file(self, value: tuple[str, bytes]) -> Outcome:
        suffix, content = value
        path = self.base / f"job{suffix}"
        path.write_bytes(content)
        try:
            job = load_job(path)
        except JobError as e:
            return named(e)
        # What the commands read off a loaded job; none of it may raise.
        assert job.base_dir == self.base.resolve() and job.rl.max_steps >= 0 and job.model_ref
        assert all(job.rl.hyperparameters.resolved(n) is not None for n in Hyperparameters.model_fields)
        assert isinstance(job.rl.grader_dict, dict)
        return None

    # -- grader specs ----------------------------------------------------------------------

    def _build(self, spec: Any) -> Outcome:
        try:
            grader = build_grader(spec, self.base)
        except GraderError as e:
            return named(e)
        self.loop.run_until_complete(close_grader(grader))
        return None

    def grader_spec(self, spec: Any) -> Outcome:
        """Both ways a spec reaches the registry: as a dict (``arft grade --grader``), and typed
        by the job's ``GraderSpec`` union (``load_job``), whose pydantic error ``load_job``
        turns into a ``JobError``."""
        problems = validate_grader(spec, self.base)  # `arft grader validate`: reports, never raises
        assert isinstance(problems, list) and all(p.strip() for p in problems)
        as_dict = self._build(spec)
        try:
            typed = self.grader_adapter.validate_python(spec)
        except ValidationError as e:
            return named(e)
        as_typed = self._build(typed)
        return as_dict or as_typed

    # -- tool-call text --------------------------------------------------------------------

    def model_turn(self, value: tuple[str, frozenset[str] | None]) -> Outcome:
        text, allowed = value
        turn = parse_tool_calls(text, set(allowed) if allowed is not None else None)
        assert isinstance(turn, ParsedTurn)
        for call in turn.tool_calls:
            assert call.function.name.strip() and isinstance(json.loads(call.function.arguments), dict)
        for reason in turn.errors:
            assert reason.strip()
        return turn.errors[0] if turn.errors else None

    # -- tool responses --------------------------------------------------------------------

    def response_body(self, raw: bytes) -> Outcome:
        """What ``EndpointTool`` does with a 2xx body (``BadAnswer``: retried, then an
        infra error), and with an error body (``server_message``: the reason shown)."""
        assert isinstance(server_message(raw), str)
        try:
            output = _output(inputs.CALL_ID, json_object(raw))
        except BadAnswer as e:
            return named(e)
        assert isinstance(output, str)
        return None

    def http_answer(self, value: tuple[Answer, dict[str, Any]]) -> Outcome:
        """A real call to a tool server on 127.0.0.1 that answers with the generated status,
        headers and body; a failure must be a ``ToolOutcome`` with its reason, never raised."""
        self.answer, item = value
        assert self.tool is not None
        ctx = ToolContext(trace_id="trace_fuzz", call_id=inputs.CALL_ID, item=item)
        outcome = self.loop.run_until_complete(self.tool.call('{"q": "x"}', ctx))
        assert isinstance(outcome, ToolOutcome) and isinstance(outcome.output, str)
        if outcome.status == "ok":
            return None
        assert outcome.error and outcome.output.strip()
        return f"{outcome.status}: {outcome.error}"

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The tool server: drains the request, answers with ``self.answer``."""
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        status, headers, body = self.answer
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    # -- arft import logs ------------------------------------------------------------------

    def import_log(self, value: tuple[bytes, dict[str, Any]]) -> Outcome:
        content, options = value
        logs = self.root / "traffic.jsonl"
        logs.write_bytes(content)
        try:  # the command-line options first: a bad --item or --redact is the user's error
            parse_item_paths(options["item_paths"])
            build_redactor(options["redact"])
        except (ArftError, ValueError) as e:
            return named(e)
        outcomes = [self._read(logs, options), self._doctor(logs)]
        try:
            report = import_traffic(logs, self.root / "imported", force=True,
                                    job=self.job if options["with_job"] else None,
                                    item_paths=options["item_paths"],
                                    item_optional=options["item_optional"], redact=options["redact"])
        except (TrafficImportError, DatasetError) as e:
            return named(e)
        if report.train:  # what the import writes, the dataset loader reads
            load_tasks(self.root / "imported" / "train.jsonl")
        return next((o for o in outcomes if o is not None), None)

    def _read(self, logs: Path, options: dict[str, Any]) -> Outcome:
        log = read_traffic(logs, item_paths=options["item_paths"], item_optional=options["item_optional"],
                           redactor=build_redactor(options["redact"]))
        assert all(e.strip() for e in log.errors)
        return log.errors[0] if log.errors else None

    def _doctor(self, logs: Path) -> Outcome:
        try:
            traffic_tasks(logs)
        except DatasetError as e:
            return named(e)
        return None

    # -- wiring ----------------------------------------------------------------------------

    def targets(self) -> list[Target]:
        return [
            Target("dataset_rows", "a JSONL dataset file -> load_tasks", inputs.DATASET_FILE,
                   self.dataset),
            Target("job_specs", "a YAML/JSON job file -> load_job", inputs.JOB_FILE, self.job_file),
            Target("grader_specs", "a grader spec -> GraderSpec + graders.registry.build_grader",
                   inputs.GRADER_SPEC, self.grader_spec),
            Target("tool_call_text", "model text -> models.toolcalls.parse_tool_calls",
                   inputs.MODEL_TURN, self.model_turn),
            Target("tool_response_body", "an endpoint's body -> json_object + the tool's output parser",
                   inputs.RESPONSE_BODY, self.response_body),
            Target("tool_response_http", "status/headers/body from 127.0.0.1 -> EndpointTool.call",
                   inputs.HTTP_CALL, self.http_answer),
            Target("import_logs", "a traffic JSONL -> read_traffic, traffic_tasks, import_traffic",
                   st.tuples(inputs.TRAFFIC_FILE, inputs.IMPORT_OPTIONS), self.import_log),
        ]


@contextmanager
def open_targets(root: Path) -> Iterator[dict[str, Target]]:
    """Every target by name, over the scratch folder ``root``, while its tool server runs."""
    loop = asyncio.new_event_loop()
    runner = _Runner(root, loop)
    try:
        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            await runner.app(scope, receive, send)

        with serve(app, name="fuzz tool server") as url:
            # The server half of a broken answer (a body after a 204, say) is not under test.
            logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
            spec = EndpointToolSpec(name="lookup_order", server_url=f"{url}/tool", timeout_s=5,
                                    max_retries=1)
            runner.tool = EndpointTool(spec, backoff_s=0.0)
            try:
                yield {t.name: t for t in runner.targets()}
            finally:
                loop.run_until_complete(runner.tool.aclose())
    finally:
        loop.close()
