"""The C ABI of arft's CPU kernels, read from their one header (``csrc/arft_cpu.h``).

``prototypes()`` parses the header's declarations (the C types the kernels use: ``int``,
``int64_t``, ``float``, ``void``, ``arft_bf16``, pointers, ``const``, and the marks
``ARFT_CONTIGUOUS`` and ``ARFT_OPTIONAL``); ``bind`` gives a library's functions as ``Function``s
whose ``argtypes``/``restype`` come from those prototypes, and whose calls check what ctypes
cannot: the argument count, and for each pointer a CPU tensor of the dtype the header names
(contiguous where it says so, ``None`` only where it may be null) or, for ``int64_t*``, a ctypes
array. A mistake is a ``TypeError`` or ``ValueError`` naming the function and the argument,
never a crash in the kernel. torch is imported lazily.
"""

from __future__ import annotations

import ctypes
import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

if TYPE_CHECKING:
    import torch

HEADER = Path(__file__).resolve().parent / "csrc" / "arft_cpu.h"
SCALARS = {"int": ctypes.c_int, "int64_t": ctypes.c_int64, "float": ctypes.c_float}
"""The C scalar types the header may use, with their ctypes."""
ELEMENTS = ("void", "float", "int64_t", "arft_bf16")
"""The element types a pointer may have (``void``: float32 or bfloat16)."""
MARKS = ("ARFT_CONTIGUOUS", "ARFT_OPTIONAL", "const")
_DECLARATION = re.compile(r"([A-Za-z_][\w\s\*]*?)\b(arft_\w+)\s*\(([^)]*)\)\s*;")
_LIBRARY = re.compile(r"^\s*//\s*library:\s*(\w+)\s*$", re.M)


class CType(NamedTuple):
    """A parameter's or result's C type: the base type, and whether it is a pointer to it."""

    base: str
    pointer: bool = False


class Param(NamedTuple):
    """One parameter: its name, type and the header's marks."""

    name: str
    ctype: CType
    contiguous: bool = False
    optional: bool = False


class Prototype(NamedTuple):
    """One exported function as the header declares it, and the library that exports it."""

    name: str
    library: str
    restype: CType
    params: tuple[Param, ...]


def parse(text: str) -> dict[str, Prototype]:
    """The prototypes declared in header ``text``, by name; a function belongs to the library of
    the last ``// library: NAME`` line above it. Raises ``ValueError`` on a type it does not know."""
    found: dict[str, Prototype] = {}
    sections = _LIBRARY.split(text)  # the text before the first mark, then (name, its text) pairs
    if _DECLARATION.search(_code_only(sections[0])):
        raise ValueError("arft_cpu.h: a function comes before any '// library: NAME' line")
    for library, section in zip(sections[1::2], sections[2::2]):
        for match in _DECLARATION.finditer(_code_only(section)):
            restype = _ctype(match.group(1).split(), match.group(2))
            found[match.group(2)] = Prototype(match.group(2), library, restype, _params(match.group(3), match.group(2)))
    return found


@functools.cache
def prototypes() -> dict[str, Prototype]:
    """The header's prototypes (read once a process)."""
    return parse(HEADER.read_text())


def of_library(library: str) -> list[Prototype]:
    """The functions the header says ``library`` exports, in its order."""
    return [p for p in prototypes().values() if p.library == library]


def bind(lib: ctypes.CDLL, library: str) -> dict[str, "Function"]:
    """Every function the header declares for ``library``, looked up in ``lib`` and checked on
    each call. Raises ``AttributeError`` where ``lib`` lacks one (a stale or foreign build)."""
    return {p.name: Function(getattr(lib, p.name), p) for p in of_library(library)}


class Function:
    """An exported function called through its prototype (module doc): ``fn(*args)`` checks the
    count and each pointer argument, then calls the kernel with the tensors' addresses."""

    def __init__(self, fn: Any, proto: Prototype) -> None:
        fn.argtypes = [ctypes.c_void_p if p.ctype.pointer else SCALARS[p.ctype.base] for p in proto.params]
        fn.restype = None if proto.restype == CType("void") else (
            ctypes.c_void_p if proto.restype.pointer else SCALARS[proto.restype.base])
        self._fn, self.proto, self._count = fn, proto, len(proto.params)
        # only the pointers need a check here: ctypes itself refuses a scalar of the wrong type
        self._pointers = [(i, _pointer(f"{proto.name}: argument {i + 1} ({p.name})", p))
                          for i, p in enumerate(proto.params) if p.ctype.pointer]

    def __call__(self, *args: Any) -> Any:
        if len(args) != self._count:
            raise TypeError(f"{self.proto.name} takes {self._count} arguments "
                            f"({', '.join(p.name for p in self.proto.params)}), got {len(args)}")
        values = list(args)
        for i, check in self._pointers:
            values[i] = check(values[i])
        try:
            return self._fn(*values)
        except ctypes.ArgumentError as exc:
            raise TypeError(f"{self.proto.name}: {exc}") from None

    def __repr__(self) -> str:
        return f"<arft CPU kernel {self.proto.name}({self._count} arguments)>"


def _pointer(where: str, param: Param) -> Callable[[Any], Any]:
    """The check of one pointer argument (named ``where`` in its errors): a tensor's address after
    its checks, a ctypes ``int64`` array as it is (``int64_t*`` only), or ``None`` where optional.
    It runs on every call of a decode step's kernels, so it does no more than it must."""
    import torch

    tensor, dtypes = torch.Tensor, _dtypes(param.ctype.base)
    contiguous, optional, arrays = param.contiguous, param.optional, param.ctype.base == "int64_t"

    def check(value: Any) -> Any:
        if isinstance(value, tensor):
            if value.dtype not in dtypes or not value.is_cpu:
                raise ValueError(f"{where} wants a CPU tensor of {' or '.join(map(str, dtypes))}, got {value.dtype} "
                                 f"on {value.device}")
            if contiguous and not value.is_contiguous():
                raise ValueError(f"{where} wants a contiguous tensor, got strides {value.stride()}")
            return value.data_ptr()
        if value is None:
            if not optional:
                raise ValueError(f"{where} may not be null")
            return None
        if arrays and isinstance(value, ctypes.Array) and value._type_ is ctypes.c_int64:
            return value
        raise TypeError(f"{where} wants a tensor{' or a ctypes int64 array' if arrays else ''}, "
                        f"got {type(value).__name__}")

    return check


def _dtypes(base: str) -> "tuple[torch.dtype, ...]":
    import torch

    return {"void": (torch.float32, torch.bfloat16), "float": (torch.float32,), "int64_t": (torch.int64,),
            "arft_bf16": (torch.bfloat16,)}[base]


def _code_only(text: str) -> str:
    """``text`` without comments and preprocessor lines (the declarations are what remains)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def _params(text: str, function: str) -> tuple[Param, ...]:
    """The parameters of one declaration (``void`` or nothing: none)."""
    if text.strip() in ("", "void"):
        return ()
    params = []
    for i, part in enumerate(text.split(",")):
        words = part.replace("*", " * ").split()
        if len(words) < 2 or words[-1] in ("*", *SCALARS, *ELEMENTS):
            raise ValueError(f"arft_cpu.h: parameter {i + 1} of {function} needs a name ({part.strip()!r})")
        name = words[-1]
        params.append(Param(name, _ctype(words[:-1], f"{function}'s {name}"), "ARFT_CONTIGUOUS" in words,
                            "ARFT_OPTIONAL" in words))
    return tuple(params)


def _ctype(words: list[str], what: str) -> CType:
    """The type named by ``words`` (its marks aside), checked against what the reader knows."""
    pointers = sum(w.count("*") for w in words)
    names = [w for w in " ".join(words).replace("*", " ").split() if w not in MARKS]
    if len(names) != 1 or pointers > 1 or (pointers and names[0] not in ELEMENTS) or (
            not pointers and names[0] not in (*SCALARS, "void")):
        raise ValueError(f"arft_cpu.h: {what} has a type the reader does not know: {' '.join(words)!r} "
                         f"(known: {', '.join(SCALARS)}, void, and pointers to {', '.join(ELEMENTS)})")
    return CType(names[0], pointers == 1)
