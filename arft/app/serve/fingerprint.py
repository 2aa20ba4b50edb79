"""Which weights ``arft serve`` answers with: the ``PolicyStamp`` of a served model, shown to clients.

* ``system_fingerprint`` on every ``chat.completion`` and chunk: ``arft-<step>-<hash>``, the
  training step of the weights and their content hash (``arft.models.weights_hash``); OpenAI
  clients already expose it (``completion.system_fingerprint``);
* the response header ``x-arft-policy: step=<step>; hash=<hash>``;
* on start, ``arft serve RUN_DIR`` prints the hash of the checkpoint it loaded: the hash the
  rollouts of that step's weights record in the run's store (``arft doctor RUN_DIR`` checks them).

A run's tuned model is stamped with its latest checkpoint (step and hash of
``trainable.safetensors``); a plain model, and the base served beside a tuned one, with step 0 and
the hash of all its weights. A model whose weights arft does not hold (vLLM's base) has no stamp:
no fingerprint, no header.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arft.records import PolicyStamp

POLICY_HEADER = "x-arft-policy"


def fingerprint(stamp: PolicyStamp | None) -> str | None:
    """The ``system_fingerprint`` of an answer sampled by ``stamp``'s weights."""
    return None if stamp is None else f"arft-{stamp.version}-{stamp.hash}"


def policy_headers(stamp: PolicyStamp | None) -> dict[str, str]:
    """The response headers that name ``stamp``'s weights (none without a stamp)."""
    return {} if stamp is None else {POLICY_HEADER: f"step={stamp.version}; hash={stamp.hash}"}


def stamp_of(engine: object) -> PolicyStamp | None:
    """The stamp a served engine was given (``TransformersEngine.policy``, ``VLLMEngine.policy``)."""
    stamp = getattr(engine, "policy", None)
    return stamp if isinstance(stamp, PolicyStamp) else None


def checkpoint_stamp(run_dir: Path) -> PolicyStamp:
    """The stamp of ``run_dir``'s latest checkpoint: its step and the hash of its trainable weights
    (the adapter, or every weight), which is the hash the trainer stamped that step's weights with."""
    from safetensors.torch import load_file

    from arft.models.weights_hash import weights_hash
    from arft.tracing.run_dir import RunDir, checkpoint_step
    from arft.trainer.checkpoints import CheckpointError

    checkpoint = RunDir(run_dir).latest_checkpoint()
    if checkpoint is None:
        raise CheckpointError(f"{run_dir} has no checkpoint yet: train at least `checkpoint_every` steps")
    step = checkpoint_step(checkpoint)
    assert step is not None, "a complete checkpoint folder is named step-NNNNNN"
    return PolicyStamp(version=step, hash=weights_hash(load_file(str(checkpoint / "trainable.safetensors"))))


def model_stamp(model: Any) -> PolicyStamp:
    """Step 0 and the hash of every weight of ``model`` (a plain model, or the base of a run)."""
    from arft.models.weights_hash import weights_hash

    return PolicyStamp(version=0, hash=weights_hash(model.state_dict()))
