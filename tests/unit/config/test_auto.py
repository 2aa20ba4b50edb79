"""Every ``"auto"`` of a job resolves in ``arft.config.auto``; runtime facts are asked only for
``auto`` (a timing or a CUDA probe costs time)."""

from __future__ import annotations

import pytest

from arft.config import Hyperparameters, auto


def never() -> bool:
    raise AssertionError("the fact was asked for a setting that is not auto")


def test_hyperparameters() -> None:
    hp = Hyperparameters(batch_size=2)
    assert [hp.resolved(n) for n in ("n_epochs", "batch_size", "compute_multiplier", "eval_interval",
                                     "eval_samples", "learning_rate_multiplier", "reasoning_effort")
            ] == [1, 2, 1.0, 5, 4, 1.0, "medium"]


def test_max_episode_steps() -> None:
    assert (auto.max_episode_steps("auto"), auto.max_episode_steps(3)) == (10, 3)


def test_device_and_dtype_ask_the_machine_only_for_auto() -> None:
    assert auto.device("cuda:1", never) == "cuda:1" and auto.dtype("float16", never) == "float16"
    assert (auto.device("auto", lambda: True), auto.device("auto", lambda: False)) == ("cuda", "cpu")
    assert (auto.dtype("auto", lambda: True), auto.dtype("auto", lambda: False)) == ("bfloat16", "float32")


def test_bf16_autocast() -> None:
    assert auto.bf16_autocast(True, never) is True and auto.bf16_autocast(False, never) is False
    assert auto.bf16_autocast("auto", lambda: True) is True
    assert auto.bf16_autocast("auto", lambda: False) is False


def test_micro_batch_tokens_follow_the_activations_dtype() -> None:
    assert (auto.micro_batch_tokens("auto", True), auto.micro_batch_tokens("auto", False)) == (4096, 1536)
    assert auto.micro_batch_tokens(700, True) == 700 and auto.micro_batch_tokens(None, False) is None


def test_the_learner_resolves_micro_batch_tokens_by_its_activations(tokenizer: object) -> None:
    import torch

    from arft.config import TrainingSpec
    from arft.models.loading import tiny_model
    from arft.trainer.learner import Learner, wrap_policy

    for dtype, autocast, want in ((torch.float32, False, 1536), (torch.bfloat16, False, 4096),
                                  (torch.float32, True, 4096)):
        spec = TrainingSpec(bf16_autocast=autocast)
        learner = Learner(wrap_policy(tiny_model(tokenizer).to(dtype), spec, 0), spec, lr=1e-3, total_steps=1,
                          temperature=1.0, pad_id=0)
        assert learner.micro_batch_tokens == want, (dtype, autocast)
    spec = TrainingSpec(micro_batch_tokens=512)
    assert Learner(wrap_policy(tiny_model(tokenizer), spec, 0), spec, lr=1e-3, total_steps=1, temperature=1.0,
                   pad_id=0).micro_batch_tokens == 512


def test_constrained_tool_calls() -> None:
    assert auto.constrained_tool_calls("auto", True, "E") and not auto.constrained_tool_calls("auto", False, "E")
    assert not auto.constrained_tool_calls(False, True, "E")
    with pytest.raises(ValueError, match="the OpenAIEngine cannot constrain sampling"):
        auto.constrained_tool_calls(True, False, "OpenAIEngine")
