"""A Python function as a tool: schema from its signature and docstring, errors shown to the model.

The job names the function as ``package.module:attr`` or ``path/to/file.py:attr`` (a path
relative to the job file's folder). Sync functions run in a worker thread so a slow tool does
not stall other rollouts; async functions are awaited. A parameter named ``ctx`` receives the
call's ``ToolContext`` (trace_id, item, workspace) and is not shown to the model.

With ``serves`` the function answers many tools (the ones dataset rows bring, see
``arft.tools.served``): a parameter named ``tool_name`` then receives the name the model called
(also ``ctx.tool_name``), and the model's arguments bind to the rest (``**arguments`` takes any).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

from arft.config import PythonToolSpec
from arft.pyfile import NotAPythonFile, load_file
from arft.records import json_list, json_object
from arft.tools.base import ToolContext, ToolOutcome, ToolSetupError
from arft.tools.schema import function_schema

log = logging.getLogger(__name__)

CTX_PARAM = "ctx"
"""The parameter name that receives the ToolContext instead of a model-supplied argument."""
TOOL_NAME_PARAM = "tool_name"
"""The parameter name that receives the called tool's name, for a function that ``serves``."""


class PythonTool:
    """A Python callable behind the ``Tool`` protocol."""

    def __init__(self, spec: PythonToolSpec, base_dir: Path, *,
                 fn: Callable[..., object] | None = None) -> None:
        """Load ``spec.function`` (relative paths against ``base_dir``).

        ``fn``, when given, is used instead of importing ``spec.function`` (see ``from_function``).
        Raises ``ToolSetupError`` when the reference cannot be loaded; the message says what to fix.
        """
        self._spec = spec
        self._fn = fn if fn is not None else load_function(spec.function, base_dir)
        self._signature = inspect.signature(self._fn)
        self._wants_ctx = CTX_PARAM in self._signature.parameters
        own = (CTX_PARAM, TOOL_NAME_PARAM) if spec.serves else (CTX_PARAM,)
        self._wants_name = bool(spec.serves) and TOOL_NAME_PARAM in self._signature.parameters
        # The model's arguments bind against the signature without ``ctx`` (and ``tool_name``):
        # a model that sends that key gets an unknown-parameter error rather than overriding it.
        self._model_signature = self._signature.replace(parameters=[
            p for p in self._signature.parameters.values() if p.name not in own])
        self._name = spec.name or str(getattr(self._fn, "__name__", type(self._fn).__name__))
        if spec.serves and spec.parameters is not None:
            raise ToolSetupError(f"python tool '{self._name}' serves {spec.serves!r}: each served "
                                 "tool's schema is the row's own; remove 'parameters'")
        self._schema = function_schema(self._fn, name=self._name, description=spec.description,
                                       skip=own)
        if spec.parameters is not None:
            self._schema["function"]["parameters"] = self._checked_parameters(spec.parameters)
        self._is_async = _is_async(self._fn)

    @classmethod
    def from_function(cls, fn: Callable[..., object], name: str | None = None,
                      timeout_s: float = 30.0, description: str | None = None) -> PythonTool:
        """A tool from a function object already in hand (tests, notebooks, library use)."""
        ref = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
        spec = PythonToolSpec(type="python", function=ref, name=name, description=description,
                              timeout_s=timeout_s)
        return cls(spec, Path("."), fn=fn)

    @property
    def name(self) -> str:
        return self._name

    @property
    def schema(self) -> dict[str, Any]:
        return self._schema

    @property
    def serves(self) -> str:
        """The pattern of tool names it answers (``spec.serves``; else just its own name)."""
        return self._spec.serves or self._name

    async def aclose(self) -> None:
        """Nothing to release: the function lives in this process."""

    async def call(self, arguments: str, ctx: ToolContext) -> ToolOutcome:
        """Run the function with the model's JSON arguments; never raises for a tool failure."""
        name = ctx.tool_name if self._spec.serves and ctx.tool_name else self._name
        bound = self._bind(arguments, name)
        if isinstance(bound, ToolOutcome):
            return bound
        args, kwargs = bound
        if self._wants_ctx:
            kwargs[CTX_PARAM] = ctx
        if self._wants_name:
            kwargs[TOOL_NAME_PARAM] = name
        timeout = self._spec.timeout_s
        try:
            result = await asyncio.wait_for(self._run(args, kwargs), timeout=timeout)
        except asyncio.TimeoutError:
            # A sync function keeps running in its thread: Python cannot kill a thread.
            return _error(f"Error: tool '{name}' timed out after {timeout:g}s",
                          f"timed out after {timeout:g}s")
        except Exception as e:  # the function's own failure: the model sees it and may retry
            log.debug("python tool %s raised", name, exc_info=True)
            return _error(f"Error: {type(e).__name__}: {e}", f"{type(e).__name__}: {e}")
        return ToolOutcome(output=_as_text(result))

    async def _run(self, args: tuple[object, ...], kwargs: dict[str, object]) -> Any:
        if self._is_async:
            result = await cast(Awaitable[object], self._fn(*args, **kwargs))  # a coroutine function
        else:
            result = await asyncio.to_thread(self._fn, *args, **kwargs)
        if inspect.isawaitable(result):  # e.g. a sync wrapper that returns a coroutine
            result = await result
        return result

    def _bind(self, arguments: str, name: str) -> tuple[tuple[Any, ...], dict[str, Any]] | ToolOutcome:
        """Parse and bind the model's arguments (to tool ``name``), or a tool_error the model
        can act on."""
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            return _error(f"Error: the arguments of '{name}' are not valid JSON ({e}). "
                          f"Expected an object with: {self._expected()}", f"bad JSON: {e}")
        if not isinstance(parsed, dict):
            return _error(f"Error: the arguments of '{name}' must be a JSON object, got "
                          f"{type(parsed).__name__}. Expected: {self._expected()}",
                          "arguments are not a JSON object")
        try:
            bound = self._model_signature.bind(**parsed)
        except TypeError as e:
            return _error(f"Error: bad arguments for '{name}': {e}. "
                          f"Expected parameters: {self._expected()}", f"bad arguments: {e}")
        return bound.args, dict(bound.kwargs)

    def _checked_parameters(self, schema: dict[str, object]) -> dict[str, Any]:
        """The job's ``parameters`` override, checked against the function's signature.

        Raises ``ToolSetupError`` naming the tool and what does not match: a property the function does
        not take, or a parameter without a default that the schema does not require.
        """
        where = f"python tool '{self._name}' ({self._spec.function}): its 'parameters'"
        if schema.get("type", "object") != "object" or not isinstance(
                schema.get("properties", {}), dict):
            raise ToolSetupError(f"{where} must be a JSON schema of type 'object' with 'properties'")
        params = {p.name: p for p in self._model_signature.parameters.values()
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        takes_any = any(p.kind == p.VAR_KEYWORD for p in self._model_signature.parameters.values())
        unknown = sorted(set(json_object(schema.get("properties"))) - set(params))
        if unknown and not takes_any:
            raise ToolSetupError(f"{where} name {', '.join(map(repr, unknown))}, which the function "
                                 f"does not take; it takes: {self._expected()}")
        required = set(json_list(schema.get("required")))
        missing = sorted(n for n, p in params.items() if p.default is p.empty and n not in required)
        if missing:
            raise ToolSetupError(f"{where} must require {', '.join(map(repr, missing))} (no default "
                                 "in the function); add them to 'required'")
        return {"type": "object", **schema}

    def _expected(self) -> str:
        """The parameters the model may pass, e.g. ``city (str, required), units (default 'c')``."""
        if self._spec.serves:  # one handler, many tools: what each takes is in the row's schema
            return "the parameters of the tool's schema"
        parts = []
        for p in self._model_signature.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            notes = [] if p.annotation is p.empty else [_type_name(p.annotation)]
            notes.append("required" if p.default is p.empty else f"default {p.default!r}")
            parts.append(f"{p.name} ({', '.join(notes)})")
        return ", ".join(parts) or "no parameters ({})"


def load_function(ref: str, base_dir: Path, what: str = "python tool function") -> Callable[..., Any]:
    """Import ``package.module:attr`` or ``file.py:attr`` (relative to ``base_dir``).

    ``attr`` may be dotted (``Class.method``). Raises ``ToolSetupError`` naming the reference (as
    ``what``: an agent entrypoint too) and the fix.
    """
    target, sep, attr = ref.rpartition(":")
    if not sep or not target or not attr:
        raise ToolSetupError(f"{what} '{ref}': write it as 'package.module:function' "
                             "or 'path/to/file.py:function'")
    is_file = target.endswith(".py") or "/" in target or "\\" in target
    module = _import_file(ref, target, base_dir, what) if is_file else _import_module(ref, target, what)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = sorted(n for n in dir(module) if not n.startswith("_"))
            raise ToolSetupError(f"{what} '{ref}': '{target}' has no attribute "
                                 f"'{attr}'; it defines: {', '.join(names) or 'nothing public'}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ToolSetupError(f"{what} '{ref}': '{attr}' is not callable (it is "
                             f"of type {type(obj).__name__}); point at a function")
    return obj


def _import_module(ref: str, name: str, what: str) -> Any:
    try:
        return importlib.import_module(name)
    except Exception as e:
        raise ToolSetupError(f"{what} '{ref}': cannot import module '{name}' "
                             f"({type(e).__name__}: {e}); install it or put it on PYTHONPATH, or "
                             "use 'path/to/file.py:function'") from e


def _import_file(ref: str, target: str, base_dir: Path, what: str) -> Any:
    path = Path(target).expanduser()
    path = (path if path.is_absolute() else Path(base_dir) / path).resolve()
    if not path.is_file():
        raise ToolSetupError(f"{what} '{ref}': file {path} not found (relative paths "
                             f"are resolved against the job file's folder {Path(base_dir).resolve()})")
    # A unique module name: two jobs (or two tools) may load different files called tools.py.
    name = f"arft_tool_{path.stem}_{uuid.uuid4().hex[:8]}"
    try:
        return load_file(path, name)
    except NotAPythonFile as e:
        raise ToolSetupError(f"{what} '{ref}': {path} is not an importable Python file") from e
    except Exception as e:
        raise ToolSetupError(f"{what} '{ref}': importing {path} failed "
                             f"({type(e).__name__}: {e}); fix the file") from e


def _is_async(fn: Callable[..., object]) -> bool:
    call = getattr(fn, "__call__", None)  # noqa: B004 - the method itself: is it a coroutine function
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


def _type_name(annotation: object) -> str:
    if isinstance(annotation, str):
        return annotation
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _as_text(value: object) -> str:
    """What the model sees: a str as is, anything else as JSON (``str()`` for the unencodable)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):  # e.g. a circular structure
        return str(value)


def _error(output: str, reason: str) -> ToolOutcome:
    return ToolOutcome(output=output, status="tool_error", error=reason)
