"""Prepacked oneDNN linears: the same results as ``F.linear`` within float rounding, only inside
``packed_passes`` and only where no gradient is wanted; a written weight is packed again."""

from __future__ import annotations

import copy
import pickle
import threading
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from arft.config import TransformersEngineSpec
from arft.cpu import packed_linear
from arft.engines.factory import transformers_options
from arft.cpu.packed_linear import MAX_ROWS, packed_passes
from arft.engines.transformers.engine import TransformersEngine
from tests.specs import sampling
from tests.unit.engines.transformers.test_engine import varied_model

pytestmark = pytest.mark.skipif(not packed_linear.available(), reason="torch built without oneDNN")


def layer(seed: int = 0, bias: bool = True) -> torch.nn.Linear:
    torch.manual_seed(seed)
    module = torch.nn.Linear(48, 40, bias=bias)
    assert packed_linear.enable(module) == 1
    return module


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 48), (3, 1, 48), (2, 7, 48)])
def test_packed_equals_f_linear(shape: tuple[int, ...], bias: bool) -> None:
    module = layer(bias=bias)
    x = torch.randn(shape)
    with torch.no_grad(), packed_passes():
        got = module(x)
    assert packed_linear.packed_weight(module) is not None  # the packed path ran
    assert got.shape == (*shape[:-1], 40)
    assert torch.allclose(got, F.linear(x, module.weight, module.bias), atol=1e-5)


def test_unsupported_dtypes_are_left_as_they_are() -> None:
    module = torch.nn.Linear(8, 8).to(torch.float16)
    assert packed_linear.enable(module) == 0 and type(module) is torch.nn.Linear
    assert packed_linear.supports(torch.float32)
    assert not packed_linear.supports(torch.float16)


def test_outside_the_block_and_for_large_inputs_it_is_f_linear_exactly() -> None:
    module = layer()
    x = torch.randn(4, 48)
    with torch.no_grad():
        assert torch.equal(module(x), F.linear(x, module.weight, module.bias))
        big = torch.randn(MAX_ROWS + 1, 48)
        with packed_passes():
            assert torch.equal(module(big), F.linear(big, module.weight, module.bias))
    assert packed_linear.packed_weight(module) is None  # never packed


def packed_out(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(), packed_passes():
        return module(x)


def assert_follows(module: torch.nn.Linear, x: torch.Tensor) -> None:
    """The packed result is that of the module's current weight and bias."""
    assert torch.allclose(packed_out(module, x), F.linear(x, module.weight, module.bias), atol=1e-5)


def test_a_written_weight_is_packed_again() -> None:
    module = layer()
    x = torch.randn(5, 48)
    before = packed_out(module, x)  # packed from the first weight
    optimizer = torch.optim.SGD(module.parameters(), lr=0.5)
    module(torch.randn(8, 48)).square().sum().backward()  # grad path: plain F.linear
    optimizer.step()  # in place: the weight's version moves
    assert not torch.allclose(packed_out(module, x), before, atol=1e-2)
    assert_follows(module, x)
    with torch.no_grad():
        module.weight.copy_(torch.randn(40, 48))  # load_state_dict writes like this
    assert_follows(module, x)
    module.weight.data = torch.randn(40, 48)  # new .data: a new storage
    assert_follows(module, x)


def test_replaced_parameters_are_never_mistaken_for_the_packed_one() -> None:
    # a replaced parameter may get the old one's id and version 0: the pack keeps a weak
    # reference to the parameter it came from, not only its id
    module = layer()
    x = torch.randn(2, 48)
    for _ in range(20):
        packed_out(module, x)
        module.weight = torch.nn.Parameter(torch.randn(40, 48))
        module.weight = torch.nn.Parameter(torch.randn(40, 48))
        assert_follows(module, x)


def test_writes_into_data_need_forget_and_a_cast_falls_back() -> None:
    module = layer()
    x = torch.randn(4, 48)
    packed_out(module, x)
    module.weight.data.add_(1.0)  # what peft's adapter merge does: no version change
    packed_linear.forget(module)
    assert packed_linear.packed_weight(module) is None
    assert_follows(module, x)
    module.half()  # a dtype this CPU does not pack: F.linear, not the float32 pack
    with torch.no_grad(), packed_passes():
        assert torch.equal(module(x.half()), F.linear(x.half(), module.weight, module.bias))


def test_a_trainable_bias_keeps_its_gradient() -> None:
    module = layer()
    module.weight.requires_grad_(False)
    x = torch.randn(3, 48)
    with packed_passes():
        module(x).sum().backward()
    assert module.bias.grad is not None and torch.allclose(module.bias.grad, torch.full((40,), 3.0))


def test_a_packed_model_copies_pickles_and_saves_like_a_plain_one() -> None:
    module = layer()
    x = torch.randn(3, 48)
    with torch.no_grad(), packed_passes():
        want = module(x)
    assert packed_linear.packed_weight(module) is not None
    for twin in (copy.deepcopy(module), pickle.loads(pickle.dumps(module))):
        assert type(twin) is type(module) and packed_linear.packed_weight(twin) is None
        with torch.no_grad(), packed_passes():
            assert torch.equal(twin(x), want)
    assert set(module.state_dict()) == {"weight", "bias"}
    plain = torch.nn.Linear(48, 40)
    plain.load_state_dict(module.state_dict())
    assert torch.allclose(plain(x), want, atol=1e-5)


def test_gradients_flow_inside_the_block() -> None:
    module = layer()
    x = torch.randn(3, 48)
    with packed_passes():
        module(x).sum().backward()
    assert module.weight.grad is not None and torch.allclose(module.weight.grad, x.sum(0).expand(40, 48))


def test_the_block_is_per_thread() -> None:
    module = layer()
    seen: list[Any] = []

    def other() -> None:  # not inside this thread's block
        with torch.no_grad():
            module(torch.randn(2, 48))
        seen.append(packed_linear.packed_weight(module))

    with torch.no_grad(), packed_passes():
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert seen == [None]


async def test_engine_with_packed_linears_matches_f_linear(tokenizer: Any) -> None:
    torch.set_num_threads(1)
    model = varied_model(tokenizer, seed=4)
    other = copy.deepcopy(model)
    packed = TransformersEngine(model, tokenizer, **transformers_options(TransformersEngineSpec(max_batch_size=4)))
    off = TransformersEngineSpec.model_validate({"max_batch_size": 4, "packed_linears": False})
    plain = TransformersEngine(other, tokenizer, **transformers_options(off))
    try:
        prompt = list(range(300, 340))
        params = [sampling(temperature=0.0, max_new_tokens=8), sampling(temperature=1.0, max_new_tokens=8, seed=3)]
        for p in params:
            got, want = await packed.generate(prompt, p), await plain.generate(prompt, p)
            assert got.token_ids == want.token_ids
            assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        parent = {id(child): module for module in model.modules() for child in module.children()}
        # packed alone, or with its siblings under its attention or MLP block (the fused step's q/k/v, gate/up)
        assert linears and all(packed_linear.packed_weight(m) is not None
                               or packed_linear.packed_weight(parent[id(m)]) is not None for m in linears)
        assert not any(type(m).__name__ == "PackedLinear" for m in other.modules())
    finally:
        await packed.aclose()
        await plain.aclose()
    assert not any(packed_linear.packed_weight(m) is not None for m in model.modules())  # closing frees them


async def test_engine_fused_pass_is_the_jobs_to_turn_off(tokenizer: Any) -> None:
    on = TransformersEngine(varied_model(tokenizer), tokenizer, **transformers_options(TransformersEngineSpec()))
    off_spec = TransformersEngineSpec.model_validate({"fused_pass": False})
    off = TransformersEngine(varied_model(tokenizer), tokenizer, **transformers_options(off_spec))
    try:
        assert on._pass.fused is not None and off._pass.fused is None and off._pass.packed
    finally:
        await on.aclose()
        await off.aclose()
