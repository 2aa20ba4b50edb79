"""The training process the kill tests SIGKILL: ``python -m tests.integration.kill_child JOB RUN_DIR
FAULT [--resume]`` trains JOB into RUN_DIR on the tiny model (seed 5, one thread, one request per
forward pass: the uninterrupted in-process run gets the same floating point), with ``FAULT``
(``POINT:STEP[:NTH]``, see ``arft.app.faults``; ``none`` for no fault) armed."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from arft.app.faults import Fault, train_with_fault
from arft.config import load_job
from arft.models.loading import load_tokenizer, tiny_model
from tests.training import LengthGrader


def main(argv: list[str]) -> None:
    import torch

    job_file, run_dir, fault, *flags = argv
    torch.set_num_threads(1)
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    asyncio.run(train_with_fault(load_job(Path(job_file)), Path(run_dir),
                                 None if fault == "none" else Fault.parse(fault), resume="--resume" in flags,
                                 model=tiny_model(tokenizer, seed=5), tokenizer=tokenizer, grader=LengthGrader(),
                                 max_batch_size=1))


if __name__ == "__main__":
    main(sys.argv[1:])
