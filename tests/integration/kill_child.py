"""The training process the kill tests SIGKILL: ``python -m tests.integration.kill_child JOB RUN_DIR
FAULT [--resume]`` trains JOB into RUN_DIR on the tiny model (seed 5, one thread, one request per
forward pass: the uninterrupted in-process run gets the same floating point), with ``FAULT``
(``POINT:STEP[:NTH]``, see ``arft.app.faults``; ``none`` for no fault) armed.

``python -m tests.integration.kill_child --serve`` is a fork server for many such processes: it
imports torch, transformers and arft once, then for each JSON line ``{"argv": [...], "log": PATH}``
on stdin forks a child that runs ``main(argv)`` with its output appended to PATH, and answers
with the child's exit code as ``subprocess`` writes it (``-9``: SIGKILLed). Each child is still a
process of its own that kills itself; only the seconds of imports are paid once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import traceback
from pathlib import Path

from arft.app.faults import Fault, train_with_fault
from arft.config import load_job
from arft.models.loading import load_tokenizer, tiny_model
from tests.training import LengthGrader

CHILD_TIMEOUT_S = 600
"""A served child still running after this long is ended by SIGALRM (its exit code says so)."""


def main(argv: list[str]) -> None:
    import torch

    job_file, run_dir, fault, *flags = argv
    torch.set_num_threads(1)
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    asyncio.run(train_with_fault(load_job(Path(job_file)), Path(run_dir),
                                 None if fault == "none" else Fault.parse(fault), resume="--resume" in flags,
                                 model=tiny_model(tokenizer, seed=5), tokenizer=tokenizer, grader=LengthGrader(),
                                 max_batch_size=1))


def serve() -> None:
    """The fork server (see the module docstring). Nothing here runs torch before a fork: a
    child starts from the imports only, as a fresh process would."""
    import peft  # noqa: F401  (what every child would import itself)
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import arft.app.train  # noqa: F401
    import arft.engines.transformers.engine  # noqa: F401
    import arft.trainer.learner  # noqa: F401

    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request["argv"], request["log"])
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)


def _child(argv: list[str], log: str) -> None:
    """In the forked process: ``main(argv)`` with its output in ``log``; never returns."""
    code = 1
    try:
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(out, 1)
        os.dup2(out, 2)
        signal.alarm(CHILD_TIMEOUT_S)
        main(argv)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # not the server's exit handlers, nor its stdin


if __name__ == "__main__":
    serve() if sys.argv[1:] == ["--serve"] else main(sys.argv[1:])
