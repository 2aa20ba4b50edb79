"""The job spec: the hosted Agent RFT shape, unchanged, plus arft's own sections beside it.

A job file is YAML or JSON::

    model: smollm2-135m-instruct
    training_file: train.jsonl
    validation_file: val.jsonl
    method:
      type: reinforcement
      reinforcement:
        grader: {type: string_check, ...}
        tools: [{name: lookup, server_url: http://127.0.0.1:8000/lookup}]
        max_episode_steps: 6
        hyperparameters: {n_epochs: auto, batch_size: auto, eval_samples: 4}
    # arft's own sections (all optional, documented defaults):
    engine: {type: transformers}
    sampling: {temperature: 1.0}
    rollout: {max_turns: 6}
    logging: {wandb: {project: my-agent}, mlflow: {experiment: my-agent}}  # TensorBoard is on

Every field of every section is documented where it is defined (the string under it, also
``Model.model_fields[name].description``); what each ``"auto"`` becomes is in ``arft.config.auto``.
Unknown or misspelt keys are errors that name the key, the file and the line, inside grader and
tool specs too. Input paths (datasets, workspace templates, python tool files) resolve against
the job file's folder; ``run_dir`` resolves against the current directory.

Modules: ``base`` (the strict base model), ``tools`` and ``graders`` (the typed tool and grader
specs), ``engines`` (the engine section, one spec per engine type), ``sections`` (arft's other
sections), ``job`` (the whole job), ``loading`` (``load_job``), ``auto`` (the ``"auto"``
resolutions).
"""

from arft.config.base import EMBEDDED_MODEL, Auto, Spec
from arft.config.engines import (EngineSpec, EngineType, LocalModelSpec, OpenAIEngineSpec, TransformersEngineSpec,
                                 VLLMEngineSpec, engine_as, local_model)
from arft.config.graders import BuiltinGraderSpec, GraderSpec, as_written
from arft.config.job import Hyperparameters, JobSpec, Method, Reinforcement
from arft.config.loading import JobError, load_job
from arft.config.monitors import MonitorsSpec
from arft.config.sections import (BudgetSpec, ClusterSpec, LoggingSpec, LoraSpec, MlflowSpec, OpenTelemetrySpec,
                                  RaySpec, RolloutSpec, SamplingSpec, TrainingSpec, WandbSpec)
from arft.config.tools import EndpointToolSpec, McpToolSpec, PythonToolSpec, ShellToolSpec, ToolSpec

__all__ = [
    "EMBEDDED_MODEL", "Auto", "BudgetSpec", "BuiltinGraderSpec", "ClusterSpec", "EndpointToolSpec", "EngineSpec",
    "EngineType", "GraderSpec", "Hyperparameters", "JobError", "JobSpec", "LocalModelSpec", "LoggingSpec", "LoraSpec",
    "McpToolSpec", "Method", "MlflowSpec", "MonitorsSpec", "OpenAIEngineSpec", "OpenTelemetrySpec", "PythonToolSpec",
    "RaySpec", "Reinforcement", "RolloutSpec", "SamplingSpec", "ShellToolSpec", "Spec", "ToolSpec", "TrainingSpec",
    "TransformersEngineSpec", "VLLMEngineSpec", "WandbSpec", "as_written", "engine_as", "load_job", "local_model",
]
