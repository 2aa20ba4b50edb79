"""A job's data splits: which file holds each split, and its tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from arft.config import JobError, JobSpec
from arft.data.dataset import load_tasks
from arft.records import Task

Split = Literal["train", "validation"]


def split_path(job: JobSpec, split: Split) -> Path:
    """The file of ``split`` (validation falls back to the training file when the job has none)."""
    name = job.validation_file if split == "validation" and job.validation_file else job.training_file
    if name is None:
        raise JobError("the job names no dataset: set training_file (and validation_file)")
    path = job.path(name)
    assert path is not None
    return path


def load_split(job: JobSpec, split: Split, limit: int | None = None) -> list[Task]:
    """The tasks of one split, the first ``limit`` of them when given."""
    tasks = load_tasks(split_path(job, split))
    return tasks[:limit] if limit else tasks
