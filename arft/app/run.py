"""``open_run``: the one place that builds and closes a run's engine, toolbox, grader, store and
rollout runner.

Every command that runs rollouts (``arft eval``, ``arft train``, ``arft doctor``) enters
``open_run`` and gets a ``Run``; leaving it closes what it opened, in reverse order, even when the
command fails half-way. An engine or grader passed in by the caller (a trainer's policy engine, a
test's scripted engine) is used as given and closed only when ``close_engine`` says so.

Secrets: before anything starts, every ``${ENV_VAR}`` reference of the job must resolve (the
error names the field, e.g. ``method.reinforcement.tools[0].headers.Authorization``); while the
run is open, the resolved values are scrubbed from every log record; ``job_record`` is the job as
it may be stored (references kept, literal secrets as ``***``). ``Run.job`` keeps the references:
only the built tools, grader and engine ever hold the resolved values.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from arft.config import JobSpec
from arft.data.dataset import check_task_tools
from arft.data.splits import Split, split_path
from arft.engines.base import ChatEngine, TokenEngine
from arft.engines.factory import build_engine
from arft.graders.base import Grader, close_grader, warm_up_grader
from arft.graders.registry import build_grader
from arft.records import Task
from arft.rollout.runner import RolloutRunner, workspace_template
from arft.secrets import check as check_secrets
from arft.secrets import redact, redacting_logs
from arft.telemetry import NO_TELEMETRY, Telemetry, open_telemetry
from arft.tools.cassette import open_tools
from arft.tools.registry import Toolbox
from arft.tracing.run_dir import RunDir
from arft.tracing.store import RunStore

Engine = TokenEngine | ChatEngine


@dataclass
class Run:
    """The live objects of one run directory, valid inside ``open_run``."""

    job: JobSpec
    run_dir: RunDir
    engine: Engine
    toolbox: Toolbox
    grader: Grader
    store: RunStore
    runner: RolloutRunner
    telemetry: Telemetry = NO_TELEMETRY
    """The run's OpenTelemetry export (``logging.opentelemetry``; a no-op by default)."""


def check_tools(job: JobSpec, tasks: Sequence[Task], toolbox: Toolbox, split: Split) -> None:
    """Every tool a task names must be one of the started tools (MCP names included), and every
    task's workspace template (``rollout.workspace``, per-row placeholders filled) must exist."""
    check_task_tools(tasks, toolbox.lookup, split_path(job, split))
    if job.rollout.workspace is not None and "{{" in job.rollout.workspace:
        for task in tasks:
            workspace_template(job.rollout.workspace, job.base_dir, task)


@asynccontextmanager
async def open_run(job: JobSpec, run_dir: RunDir, *, engine: Engine | None = None,
                   close_engine: bool = False, grader: Grader | None = None,
                   splits: Mapping[Split, Sequence[Task]] | None = None,
                   on_status: Callable[[str], None] = lambda s: None) -> AsyncIterator[Run]:
    """Build the run of ``job`` in ``run_dir``; close it on the way out.

    ``engine``: use this one (closed on exit only with ``close_engine``); by default the job's
    engine is built, and then always closed. ``grader``: likewise, but a passed grader is never closed here.
    ``splits``: the tasks the run will roll out, checked against the started tools before any
    rollout runs.
    """
    secret_values = check_secrets(job.model_dump(mode="json"))
    async with AsyncExitStack() as stack:
        stack.enter_context(redacting_logs(secret_values))
        telemetry = open_telemetry(job, secret_values)  # first: a missing extra stops the run before the model loads
        stack.callback(telemetry.close)  # last out: every span has ended, the buffer is sent
        own_grader = grader is None
        grader = grader if grader is not None else build_grader(job.rl.grader, job.base_dir)
        if own_grader:
            stack.push_async_callback(close_grader, grader)
        # A python grader's sandbox pool starts while the rest opens and the first rollouts run,
        # so the first grades do not wait for it (it was most of a one-batch eval's grade time).
        stack.push_async_callback(_stop, asyncio.ensure_future(warm_up_grader(grader)))
        if engine is None:
            on_status(f"loading model {job.model}")
            engine = build_engine(job, role="eval", run_dir=run_dir.path, on_status=on_status)
            close_engine = True  # what open_run builds, it closes
        if close_engine:
            stack.push_async_callback(engine.aclose)
        on_status("starting tools")
        toolbox = await open_tools(job, run_dir.path, secret_values)  # a cassette's too (tool_cassette)
        stack.push_async_callback(toolbox.aclose)
        for split, tasks in (splits or {}).items():
            if job.agent.type == "arft":  # an agent program brings its own tools
                check_tools(job, tasks, toolbox, split)
        run_dir.path.mkdir(parents=True, exist_ok=True)
        store = stack.enter_context(RunStore(run_dir.store))
        runner = RolloutRunner.from_job(job, engine, toolbox, grader, store=store,
                                        workspace_root=run_dir.workspaces)
        runner.telemetry = telemetry
        if job.agent.type != "arft":
            from arft.app.gateway.driver import program_driver  # fastapi and uvicorn load only here

            on_status("starting the gateway for the agent program")
            runner.driver = await stack.enter_async_context(program_driver(job, engine, telemetry))
        yield Run(job, run_dir, engine, toolbox, grader, store, runner, telemetry)


async def _stop(task: asyncio.Future[None]) -> None:
    """Cancel ``task`` if it still runs (the run closes before its grader's pool is up)."""
    if not task.done():
        task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass


def job_record(job: JobSpec) -> dict[str, Any]:
    """The job as stored with a run: ``model`` as an absolute reference (``arft merge`` reloads it
    from anywhere), secrets redacted (``arft.secrets.redact``: references kept, literals ``***``)."""
    return redact(job.model_copy(update={"model": job.model_ref}).model_dump(mode="json"))
