"""The kernels' build: one library per source, so a source that fails to compile turns off only its
own ops, and says why; ``python -m arft.cpu build`` reports each library and fails only when
asked to (``--strict``) and only for a library that broke."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from arft.cpu import build
from arft.cpu import kernels as cpu_kernels
from arft.cpu.__main__ import main
from arft.cpu.kernels import LibraryStatus


def test_a_source_that_fails_turns_off_only_its_own_ops(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if build.cpu_reason() is not None or "avx512f" not in build.cpu_flags() or not shutil.which("c++"):
        pytest.skip("needs an AVX-512 CPU and a compiler")
    csrc = Path(shutil.copytree(build.CSRC, tmp_path / "csrc"))
    (csrc / "train_ops.cpp").write_text((csrc / "train_ops.cpp").read_text() + "\nthis is not C++;\n")
    monkeypatch.setattr(build, "CSRC", csrc)
    monkeypatch.setenv("ARFT_KERNEL_CACHE", str(tmp_path / "cache"))
    built = build.build_all(["small_ops", "train_ops"])
    assert built[0].path is not None and built[1].path is None
    assert "building csrc/train_ops.cpp with" in str(built[1].error) and "failed (exit 1)" in str(built[1].error)
    loaded = cpu_kernels.open_built(built)
    assert loaded.kernels is not None and loaded.kernels.small_ops and not loaded.kernels.train.ops
    small, train = loaded.libraries
    assert small.reason is None and small.line() == "small_ops (RMSNorm, rotary, SiLU-mul) loaded"
    assert train.broken and train.line().startswith("train_ops (token logprobs, rotary and SiLU-mul backward) "
                                                    "off because building csrc/train_ops.cpp")
    with pytest.raises(ValueError, match="train_ops is off here"):
        import torch

        loaded.kernels.train.silu_mul_backward(*(torch.zeros(16) for _ in range(3)))


def test_a_cpu_without_the_instructions_is_no_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "cpu_flags", lambda: frozenset({"avx", "sse4_2"}))
    monkeypatch.setattr(build.platform, "machine", lambda: "x86_64")
    built = build.build_all()
    assert [b.name for b in built] == list(build.LIBRARIES) and all(b.path is None for b in built)
    loaded = cpu_kernels.open_built(built)
    assert loaded.kernels is None and not any(s.broken for s in loaded.libraries)
    assert loaded.libraries[0].line() == ("decode_attention (decode attention, AVX-512) off because this CPU has "
                                          "neither AVX-512 nor AVX2 with FMA")


@pytest.mark.parametrize(("broken", "strict", "code"), [(False, False, 0), (False, True, 0), (True, False, 0),
                                                        (True, True, 1)])
def test_python_m_arft_cpu_build_reports_each_library(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str], broken: bool, strict: bool,
                                                      code: int) -> None:
    states = (LibraryStatus("decode_attention", None), LibraryStatus("small_ops", None),
              LibraryStatus("train_attention", "no AMX with bfloat16 here"),
              LibraryStatus("train_ops", "building csrc/train_ops.cpp failed" if broken else None, broken=broken))
    monkeypatch.setattr(cpu_kernels, "status", lambda: states)
    assert main(["build", *(["--strict"] if strict else [])]) == code
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == [f"  {s.line()}" for s in states]
    assert out[3] == "  train_attention (train attention, AMX) off because no AMX with bfloat16 here"
