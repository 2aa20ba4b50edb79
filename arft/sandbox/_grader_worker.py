"""The sandboxed side of ``arft.sandbox.pool``: runs one function from untrusted Python source.

Started by the pool inside the sandbox (``launcher``: namespaces, nobody, rlimits) as
``python -I -S _grader_worker.py serve|once``. It imports nothing of arft and only the standard
library before the user's code, so it starts fast and works whatever is on ``sys.path``.

``once`` (the fresh-process mode): read ``{"hello", "args"}`` as JSON from stdin, set up, call
the function in this process, write the answer as plain JSON on stdout, exit.

``serve`` (the fork server, or "zygote"): read a length-prefixed JSON hello from stdin, set up
once (``sys.path``, pre-imports, compile and run the module), answer ``{"ready": true}``, then for
each length-prefixed request fork a fresh child that applies the per-call limits, calls the
function on the request's args and writes the answer on a private pipe; the server waits (up to
the time limit), kills the child and everything it started, wipes the scratch folders, and
answers. The function therefore always starts from the server's pristine state: nothing one call
does (globals, files in the scratch folders, background processes, SysV shared memory, semaphores
and message queues: the server removes every one in its own IPC namespace after each call, and
stops when it cannot) is seen by the next. POSIX message queues cannot be listed to be removed, so
the pool's sandbox denies them (``python_call.launcher_limits``).

Answers are ``{"value": <JSON>}`` or ``{"error": "<reason>", "kind": "exception" | "timeout" |
"killed" | "crashed" | "bad_value"}``. In both modes the protocol runs on private copies of the
original stdin/stdout; fds 0/1 of the user's code are /dev/null and stderr, so a ``print`` can
never corrupt an answer.
"""

from __future__ import annotations

import ctypes
import gc
import json
import linecache
import math
import numbers
import os
import resource
import select
import signal
import struct
import sys
import time
import traceback
from typing import Any

HEADER = struct.Struct(">I")
MAX_ANSWER_BYTES = 8 << 20
TRACEBACK_LINES = 12
PR_SET_DUMPABLE = 4


def _load_cleanup():  # noqa: ANN202 - a module
    """``_grader_cleanup.py`` beside this file, loaded by path: ``sys.path`` is the user's."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_grader_cleanup.py")
    spec = importlib.util.spec_from_file_location("_arft_grader_cleanup", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_cleanup = _load_cleanup()
kill_leftovers, wipe, remove_sysv_ipc = _cleanup.kill_leftovers, _cleanup.wipe, _cleanup.remove_sysv_ipc


# -- framing ----------------------------------------------------------------------------------


def read_exact(fd: int, n: int) -> bytes | None:
    """Exactly ``n`` bytes from a blocking fd, or None at end of file."""
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def read_message(fd: int) -> Any:
    """One length-prefixed JSON message (the hello object, or a request's argument list), or None
    at end of file."""
    head = read_exact(fd, HEADER.size)
    if head is None:
        return None
    body = read_exact(fd, HEADER.unpack(head)[0])
    return None if body is None else json.loads(body)


def write_message(fd: int, payload: bytes) -> None:
    """Write one length-prefixed message (``payload`` is already JSON)."""
    data = HEADER.pack(len(payload)) + payload
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_answer(fd: int, deadline: float) -> tuple[bytes | None, str]:
    """A child's length-prefixed answer before ``deadline``: (payload, "ok") or (None, why)."""
    buf = bytearray()
    need = HEADER.size
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    while True:
        if len(buf) >= need:
            if need == HEADER.size:
                need += HEADER.unpack(bytes(buf[:HEADER.size]))[0]
                if need > MAX_ANSWER_BYTES:
                    return None, "too_large"
                continue
            return bytes(buf[HEADER.size:need]), "ok"
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(max(1, int(left * 1000))):
            if time.monotonic() >= deadline:
                return None, "timeout"
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return None, "eof"
        buf += chunk


# -- the user's code ----------------------------------------------------------------------------


def load_function(hello: dict):  # noqa: ANN201 - returns the user's callable
    """Extend sys.path, pre-import, run the module's source; the named function."""
    for path in hello.get("sys_path", ()):
        if path not in sys.path:
            sys.path.append(path)
    for name in hello.get("preload", ()):
        try:
            __import__(name)
        except BaseException:  # noqa: BLE001 - the user's own import reports it properly
            pass
    source, filename = hello["source"], hello["filename"]
    # Tracebacks show the user's lines even though the file itself is not readable here.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = {"__name__": "__grader__", "__file__": filename, "__builtins__": __builtins__}
    exec(compile(source, filename, "exec"), module)  # noqa: S102 - this is the sandbox
    fn = module.get(hello["function"])
    if not callable(fn):
        raise TypeError(f"the source defines no function {hello['function']!r}")
    return fn


def describe_exception(exc: BaseException, skip_frames: int = 1) -> str:
    """``Type: message`` and the traceback's last lines (our own frames left out)."""
    tb = exc.__traceback__
    for _ in range(skip_frames):
        tb = tb.tb_next if tb is not None else None
    lines = "".join(traceback.format_exception(type(exc), exc, tb)).rstrip().splitlines()
    summary = traceback.format_exception_only(type(exc), exc)[-1].strip()
    tail = lines[-TRACEBACK_LINES:]
    return summary + ("\n" + "\n".join(tail) if len(lines) > 1 else "")


def _json_default(value: object) -> object:
    # numpy and other numeric scalars: their plain value (NaN/inf are judged by the caller).
    if isinstance(value, numbers.Real):
        return float(value)
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():  # np.bool_, 0-d arrays
        plain = item()
        if isinstance(plain, (bool, int, float)):
            return plain
    raise TypeError(f"{type(value).__name__} is not JSON")


def call_function(fn, args: list) -> bytes:  # noqa: ANN001
    """Call ``fn(*args)`` and encode the answer; never raises."""
    try:
        value = fn(*args)
    except BaseException as e:  # noqa: BLE001 - SystemExit and MemoryError included
        return encode({"error": describe_exception(e), "kind": "exception"})
    try:
        return json.dumps({"value": value}, default=_json_default).encode()
    except (TypeError, ValueError, RecursionError) as e:
        shown = repr(value)[:200]
        return encode({"error": f"the function returned {shown} ({type(value).__name__}), "
                                f"which is not JSON ({e})", "kind": "bad_value"})


def encode(answer: dict) -> bytes:
    return json.dumps(answer).encode()


# -- process plumbing -------------------------------------------------------------------------


def private_pipes() -> tuple[int, int]:
    """Move the protocol off fds 0/1: user code gets /dev/null and stderr there instead."""
    rfd, wfd = os.dup(0), os.dup(1)  # dup'ed fds are not inherited by exec'd programs
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return rfd, wfd


def set_dumpable(flag: int) -> None:
    """Non-dumpable: other processes of our uid (a call's leftovers) cannot ptrace us or read
    /proc/<pid>/mem or /proc/<pid>/fd of us and our children."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(ctypes.c_int(PR_SET_DUMPABLE), ctypes.c_ulong(flag), ctypes.c_ulong(0),
                   ctypes.c_ulong(0), ctypes.c_ulong(0))
    except OSError:
        pass


def apply_call_limits(limits: dict) -> None:
    """Per-call rlimits: address space = what is mapped now + the call's memory, CPU seconds."""
    with open("/proc/self/statm") as f:
        mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = mapped + limits["memory_bytes"]
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    cpu = max(1, math.ceil(limits["timeout_s"])) + 1
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard == resource.RLIM_INFINITY or cpu + 1 <= hard:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


def reseed() -> None:
    """A forked child must not share the server's random state (``random`` reseeds itself)."""
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed()
        except Exception:  # noqa: BLE001 - best effort
            pass


# -- the fork server --------------------------------------------------------------------------


def run_child(fn, args: list, limits: dict, answer_w: int, keep: tuple[int, ...]) -> None:  # noqa: ANN001
    """In the forked child: isolate, limit, call, answer, exit (never returns)."""
    code = 0
    try:
        for fd in keep:
            os.close(fd)
        os.setsid()  # its own group: killpg reaches everything it starts (short of setsid)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        apply_call_limits(limits)
        reseed()
        write_message(answer_w, call_function(fn, args))
    except BaseException:  # noqa: BLE001 - e.g. MemoryError while encoding the answer
        code = 70
    os._exit(code)


def describe_death(status: int, why: str, limits: dict) -> dict:
    """The answer for a child that gave none."""
    if why == "timeout":
        return {"error": f"timed out after {limits['timeout_s']:g} s (killed)", "kind": "timeout"}
    if why == "too_large":
        return {"error": f"the answer is larger than {MAX_ANSWER_BYTES} bytes",
                "kind": "bad_value"}
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        hints: dict[int, str] = {signal.SIGXCPU: " (CPU time limit)", signal.SIGXFSZ: " (file size limit)",
                                 signal.SIGSEGV: " (a crash, often memory exhaustion in a C extension)",
                                 signal.SIGKILL: " (killed: memory or process limit)"}
        hint = hints.get(sig, "")
        return {"error": f"the grading process was killed by {name}{hint}", "kind": "killed"}
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    return {"error": f"the grading process exited with status {code} without an answer "
                     "(os._exit or an error while encoding the answer, e.g. memory)",
            "kind": "crashed"}


def grade_once_forked(fn, args: list, hello: dict, proto: tuple[int, int],  # noqa: ANN001
                      scratch: str) -> bytes:
    """Fork a child for one call, sweep away what it left, and return the answer to send back.

    A sweep that fails ends this server without an answer (the pool then starts a fresh one, in
    a new IPC namespace): nothing of this call may reach the next."""
    limits = hello["limits"]
    answer_r, answer_w = os.pipe()
    for _ in range(40):  # EAGAIN: the sandbox uid's process limit is briefly full (see launcher)
        try:
            child = os.fork()
            break
        except BlockingIOError:
            time.sleep(0.05)
    else:
        child = os.fork()
    if child == 0:
        run_child(fn, args, limits, answer_w, (answer_r, *proto))
    os.close(answer_w)
    try:
        payload, why = read_answer(answer_r, time.monotonic() + limits["timeout_s"])
    finally:
        os.close(answer_r)
        status = kill_leftovers(child, bool(hello.get("own_pidns")))
        for folder in (scratch, "/tmp", "/dev/shm"):
            wipe(folder, scratch)
        if hello.get("own_ipcns") and not remove_sysv_ipc():
            os.write(2, b"arft grader worker: cannot remove the SysV IPC objects a call left; "
                        b"stopping so that a fresh worker takes over\n")
            os._exit(70)
    return payload if payload is not None else encode(describe_death(status, why, limits))


def serve() -> None:
    """The fork server's loop; exits when the pool closes our stdin."""
    rfd, wfd = private_pipes()
    hello = read_message(rfd)
    if hello is None:
        return
    try:
        fn = load_function(hello)
    except BaseException as e:  # noqa: BLE001 - reported to the pool, which scores it
        write_message(wfd, encode({"ready": False, "error": describe_exception(e, 2)}))
        return
    set_dumpable(0)
    scratch = os.getcwd()
    gc.collect()
    gc.freeze()  # fewer copy-on-write faults in every child
    if hello.get("own_ipcns"):
        remove_sysv_ipc()  # what loading the module made: no call may see it either
    write_message(wfd, encode({"ready": True, "pid": os.getpid()}))
    while True:
        args = read_message(rfd)  # a request is the list of arguments
        if args is None:
            return
        write_message(wfd, grade_once_forked(fn, args, hello, (rfd, wfd), scratch))


def once() -> None:
    """One call in this very process (the fresh-process mode)."""
    rfd, wfd = private_pipes()
    chunks = []
    while chunk := os.read(rfd, 1 << 20):
        chunks.append(chunk)
    request = json.loads(b"".join(chunks))
    try:
        fn = load_function(request["hello"])
    except BaseException as e:  # noqa: BLE001
        answer = encode({"error": describe_exception(e, 2), "kind": "exception"})
    else:
        answer = call_function(fn, request["args"])
    view = memoryview(answer)  # plain JSON: the caller reads stdout as text
    while view:
        view = view[os.write(wfd, view):]


if __name__ == "__main__":
    serve() if sys.argv[1:] == ["serve"] else once()
