"""The CPU kernels' ABI read from their one header: the reader sees every function each library
exports and nothing else; a call with the wrong count, a tensor of the wrong dtype, a
non-contiguous tensor where the header says contiguous, or a null where it may not be null is a
Python exception before the kernel runs; a type the reader does not know is refused."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from arft.cpu import abi, build
from arft.cpu import kernels as cpu_kernels

KERNEL = cpu_kernels.load()
needs_small_ops = pytest.mark.skipif(KERNEL is None or not KERNEL.small_ops,
                                     reason="arft's small CPU ops need AVX-512 and a compiler")


def test_the_reader_sees_every_function_each_library_exports() -> None:
    built = [b for b in build.build_all() if b.path is not None]
    if not built or not shutil.which("nm"):
        pytest.skip("no kernel library built here, or no nm")
    for b in built:
        symbols = subprocess.run(["nm", "-D", "--defined-only", str(b.path)], capture_output=True, text=True,
                                 check=True).stdout
        exported = {line.split()[-1] for line in symbols.splitlines() if line.split()[-1].startswith("arft_")}
        assert exported == {p.name for p in abi.of_library(b.name)}, b.name
    assert {p.library for p in abi.prototypes().values()} == set(build.LIBRARIES)


def test_the_header_declares_what_the_old_hand_counted_lists_had() -> None:
    """The argument counts the bindings used to count by hand, now read from the header."""
    counts = {name: len(p.params) for name, p in abi.prototypes().items()}
    assert counts["arft_decode_attention"] == 32 and counts["arft_decode_attention_avx2"] == 31
    assert counts["arft_rms_norm"] == 15 and counts["arft_rms_norm_backward"] == 9 and counts["arft_rope"] == 10
    assert counts["arft_attention_backward"] == 27 and counts["arft_attention_forward"] == 18
    assert counts["arft_token_logprobs"] == counts["arft_token_logprobs_backward"] == 11
    assert counts["arft_rope_strided"] == 14 and counts["arft_silu_mul_backward"] == 8
    norm = abi.prototypes()["arft_rms_norm"]
    weight, rstd = (next(p for p in norm.params if p.name == n) for n in ("weight", "rstd"))
    assert weight.contiguous and not weight.optional and rstd.optional and rstd.ctype == abi.CType("float", True)


def test_the_limits_come_from_the_library() -> None:
    """One value each, in the header; Python reads it from the loaded library."""
    if KERNEL is None or "train_attention" not in KERNEL.loaded or "small_ops" not in KERNEL.loaded:
        pytest.skip("the kernels do not load here")
    header = abi.HEADER.read_text()
    shift = re.search(r"#define ARFT_ATTENTION_MAX_SCORES \(\(int64_t\)1 << (\d+)\)", header)
    width = re.search(r"#define ARFT_RMS_NORM_MAX_DIM (\d+)", header)
    assert shift is not None and width is not None
    assert KERNEL.train.max_scores == 1 << int(shift.group(1)) == 1 << 24
    assert KERNEL.max_norm_dim == int(width.group(1)) == 8192


@needs_small_ops
def test_a_wrong_call_is_an_exception_not_a_crash() -> None:
    assert KERNEL is not None
    norm = abi.bind(library("small_ops"), "small_ops")["arft_rms_norm"]
    x, w, out = torch.zeros(2, 64), torch.ones(64), torch.empty(2, 64)
    good = [x, 64, None, 64, None, 64, w, out, 64, 2, 64, 1e-5, None, 0, 1]
    assert norm(*good) == 0 and torch.equal(out, torch.zeros(2, 64))
    with pytest.raises(TypeError, match=r"arft_rms_norm takes 15 arguments \(x, x_s, .*got 14"):
        norm(*good[:-1])
    with pytest.raises(ValueError, match=r"argument 7 \(weight\) wants a CPU tensor of torch.float32 or "
                                         r"torch.bfloat16, got torch.int64"):
        norm(*good[:6], w.long(), *good[7:])
    with pytest.raises(ValueError, match=r"\(weight\) wants a contiguous tensor"):
        norm(*good[:6], torch.ones(64, 2)[:, 0], *good[7:])
    with pytest.raises(ValueError, match=r"argument 1 \(x\) may not be null"):
        norm(None, *good[1:])
    with pytest.raises(TypeError, match=r"argument 1 \(x\) wants a tensor, got int"):
        norm(x.data_ptr(), *good[1:])  # a bare address: nothing to check it against
    with pytest.raises(TypeError, match="arft_rms_norm"):
        norm(*good[:11], "eps", *good[12:])
    rstd = norm.proto.params[12]
    assert rstd.name == "rstd" and rstd.optional


@needs_small_ops
def test_a_float_pointer_takes_only_float32() -> None:
    assert KERNEL is not None
    norm_back = abi.bind(library("small_ops"), "small_ops")["arft_rms_norm_backward"]
    x = torch.zeros(2, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"argument 4 \(rstd\) wants a CPU tensor of torch.float32, got "
                                         r"torch.bfloat16"):
        norm_back(x, x, torch.ones(64, dtype=torch.bfloat16), torch.ones(2, dtype=torch.bfloat16), x.clone(), 2, 64,
                  1, 1)


def test_the_reader_refuses_what_it_does_not_know() -> None:
    ok = "// library: lib\nint arft_f(const float* ARFT_CONTIGUOUS x, int64_t n);\nint64_t arft_g(void);\n"
    protos = abi.parse(ok)
    assert [p.name for p in protos["arft_f"].params] == ["x", "n"] and protos["arft_g"].params == ()
    assert protos["arft_g"].restype == abi.CType("int64_t") and protos["arft_f"].library == "lib"
    with pytest.raises(ValueError, match="type the reader does not know: 'double'"):
        abi.parse("// library: lib\nint arft_f(double x);\n")
    with pytest.raises(ValueError, match="type the reader does not know"):
        abi.parse("// library: lib\nint arft_f(const float** x);\n")
    with pytest.raises(ValueError, match="needs a name"):
        abi.parse("// library: lib\nint arft_f(const float*);\n")
    with pytest.raises(ValueError, match="before any '// library: NAME' line"):
        abi.parse("int arft_f(int x);\n")


def test_a_library_that_lacks_a_declared_function_is_off(tmp_path: Path) -> None:
    """A stale or foreign library (a function of the header missing) opens as off, with why."""
    if build.cpu_reason() is not None or not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("no compiler or CPU for the kernels here")
    source = tmp_path / "stale.cpp"
    source.write_text('extern "C" int arft_small_ops_caps() { return 1; }\n')
    lib = tmp_path / "stale.so"
    build.compile_to(lib, ("-shared", "-fPIC"), (source,))
    loaded = cpu_kernels.open_built([build.Built("small_ops", lib)])
    assert loaded.kernels is None and loaded.libraries[0].broken
    assert "does not open as the header says" in str(loaded.libraries[0].reason)
    assert "arft_rms_norm_max_dim" in str(loaded.libraries[0].reason)


def library(name: str) -> ctypes.CDLL:
    """Library ``name`` opened from the cache (built there where it is not yet)."""
    path = next(b.path for b in build.build_all([name]))
    return ctypes.CDLL(str(path))


def test_every_binding_passes_the_headers_checks() -> None:
    """Each method's call satisfies its prototype (count, dtypes, contiguity, nulls): where the
    kernel cannot run here (no AMX: train attention) it declines with its own message, not an
    ABI error."""
    if KERNEL is None or "train_attention" not in KERNEL.loaded:
        pytest.skip("the kernels do not load here")
    q, k = torch.randn(1, 2, 32, 32).bfloat16(), torch.randn(1, 1, 32, 32).bfloat16()
    lens = torch.tensor([30])
    if KERNEL.train.attention_backward_runs:
        out, lse = KERNEL.train.attention_forward(q, k, k, lens, 0.1)
        KERNEL.train.attention_backward(q, k, k, out, out, lse, lens, 0.1)
    else:
        with pytest.raises(ValueError, match="no attention of 2 query heads"):
            KERNEL.train.attention_forward(q, k, k, lens, 0.1)
        with pytest.raises(ValueError, match="no attention backward of 2 query heads"):
            KERNEL.train.attention_backward(q, k, k, q, q, torch.zeros(1, 2, 32), None, 0.1)


def test_the_compiler_holds_each_definition_to_the_header(tmp_path: Path) -> None:
    """A definition whose types differ from its prototype does not build."""
    if not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("no C++ compiler here")
    source = tmp_path / "drifted.cpp"
    source.write_text('#include "arft_cpu.h"\n'
                      'extern "C" int64_t arft_attention_max_scores(int) { return 1; }\n')
    with pytest.raises(RuntimeError, match=r"(?s)failed \(exit \d+\): .*arft_attention_max_scores"):
        build.compile_to(tmp_path / "drifted.so", ("-shared", "-fPIC", f"-I{build.CSRC}"), (source,))
