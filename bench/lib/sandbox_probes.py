"""The probes of ``bench/sandbox_escapes.py``: one small attack each, and how it is judged.

A shell probe is a bash command (most run a short Python script with the system ``python3``)
sent through the real shell tool. Its script prints ``ESCAPED <how>`` or ``BLOCKED <why>``, or,
where only the host can tell (a secret read, a file written, a process left behind), prints
what it found and the host judges: the secret token never appears in a probe's own text, so
finding it in the output means it was read. Grader probes run in a warm python-grader worker;
``tests_pass`` probes grade a workspace the "agent" rigged.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal

Via = Literal["shell", "grader", "tests_pass"]
Bench = Any  # sandbox_escapes.Bench (kept out of the imports: that module imports this one)


@dataclass(frozen=True)
class Verdict:
    """A probe's result: ``escaped`` True/False, or None when the probe could not tell."""

    escaped: bool | None
    detail: str = ""


@dataclass(frozen=True)
class Probe:
    """One attack: ``run(bench)`` performs it and judges it."""

    name: str
    via: Via
    what: str
    run: Callable[[Bench], Awaitable[Verdict]]


def marker_verdict(output: str) -> Verdict:
    """The verdict a probe script printed: a line starting ``ESCAPED`` or ``BLOCKED``."""
    lines = [ln for ln in output.splitlines() if ln.startswith(("ESCAPED", "BLOCKED"))]
    if not lines:
        return Verdict(None, f"no verdict printed: {output.strip()[-200:]!r}")
    escaped = [ln for ln in lines if ln.startswith("ESCAPED")]
    return Verdict(bool(escaped), (escaped or lines)[0].split(" ", 1)[-1][:160])


def token_verdict(bench: Bench, output: str, where: str) -> Verdict:
    """Escaped when the secret token is in the output; broken when the probe did not run."""
    if bench.token in output:
        return Verdict(True, f"read the secret from {where}")
    if "RAN" not in output:
        return Verdict(None, f"the probe did not run: {output.strip()[-200:]!r}")
    return Verdict(False, f"the secret in {where} was out of reach")


# -- the Python side of shell probes --------------------------------------------------------

PRELUDE = r'''
import ctypes, errno, json, os, platform, signal, socket, sys, time
V = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
NR = {"x86_64": dict(ptrace=101, mount=165, unshare=272, clone=56, bpf=321, add_key=248,
                     keyctl=250, perf_event_open=298, userfaultfd=323, io_uring_setup=425,
                     init_module=175, finit_module=313, process_vm_readv=310, chroot=161,
                     open_by_handle_at=304, sethostname=170),
      "aarch64": dict(ptrace=117, mount=40, unshare=97, clone=220, bpf=280, add_key=217,
                      keyctl=219, perf_event_open=241, userfaultfd=282, io_uring_setup=425,
                      init_module=105, finit_module=273, process_vm_readv=270, chroot=51,
                      open_by_handle_at=265, sethostname=161)}[platform.machine()]

def sc(name, *args):
    conv = [ctypes.c_long(a) if isinstance(a, int) else ctypes.c_char_p(a)
            if isinstance(a, bytes) else a for a in args]
    ctypes.set_errno(0)
    ret = libc.syscall(ctypes.c_long(NR[name]), *conv)
    return ret, errno.errorcode.get(ctypes.get_errno(), "ok")

def say(escaped, detail):
    print(("ESCAPED " if escaped else "BLOCKED ") + str(detail), flush=True)

def fd_probe(name, *args):
    ret, err = sc(name, *args)
    say(ret >= 0, f"{name} -> {ret} {err}")

def sleeper():
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    return pid
'''


def values(bench: Bench) -> dict[str, Any]:
    """What a probe script may know about the host (never the secret token itself)."""
    s = bench.servers
    return {"tcp_port": s.tcp_port, "udp_port": s.udp_port, "unix_path": s.unix_path,
            "abstract": s.abstract_name.decode(), "pid": bench.pid,
            "secret_private": str(bench.secret_private), "secret_world": str(bench.secret_world),
            "world_dir": str(bench.world_dir), "host_tmp": str(bench.host_tmp),
            "trainer": str(bench.secret_private.parent)}


def py(bench: Bench, body: str) -> str:
    """A bash command running ``PRELUDE + body`` with the system python3."""
    return f"python3 - '{json.dumps(values(bench))}' <<'PY'\n{PRELUDE}\n{body}\nPY"


def script_probe(name: str, what: str, body: str) -> Probe:
    """A shell probe whose Python script prints its own verdict."""
    async def run(bench: Bench) -> Verdict:
        return marker_verdict(await bench.sh(py(bench, body)))
    return Probe(name, "shell", what, run)


def secret_probe(name: str, what: str, command: Callable[[Bench], str], where: str) -> Probe:
    """A shell probe that dumps what it can reach; the host looks for the token in it."""
    async def run(bench: Bench) -> Verdict:
        return token_verdict(bench, await bench.sh(command(bench) + "; echo RAN"), where)
    return Probe(name, "shell", what, run)


def host_processes(tag: str) -> list[int]:
    """Host pids whose command line holds ``tag``."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            tagged = tag.encode() in cmdline.read_bytes()
        except OSError:
            continue
        pids += [int(cmdline.parent.name)] if tagged else []
    return pids


async def survivors(tag: str, wait_s: float = 3.0) -> list[int]:
    """Processes tagged ``tag`` still alive after ``wait_s`` (killed ones take a moment)."""
    deadline = time.monotonic() + wait_s
    while (left := host_processes(tag)) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return left


# -- network ----------------------------------------------------------------------------------

def server_probe(name: str, kind: str, what: str, body: str) -> Probe:
    """A connection to one of the bench's host servers: the server itself is the judge."""
    async def run(bench: Bench) -> Verdict:
        before = bench.servers.seen.count(kind)
        inside = marker_verdict(await bench.sh(py(bench, body)))
        await asyncio.sleep(0.3)
        if bench.servers.seen.count(kind) > before:
            return Verdict(True, f"the host's {kind} server got a connection")
        return inside
    return Probe(name, "shell", what, run)


CONNECT = '''
s = socket.socket(%s)
s.settimeout(3)
try:
    s.%s
    say(True, "reached it")
except OSError as e:
    say(False, e)
'''

NETWORK = [
    script_probe("net_tcp_outside", "TCP to an outside address (1.1.1.1:443)",
                 CONNECT % ("", 'connect(("1.1.1.1", 443))')),
    script_probe("net_udp_outside", "a UDP datagram to an outside DNS server",
                 CONNECT % ("socket.AF_INET, socket.SOCK_DGRAM",
                            'sendto(b"x", ("8.8.8.8", 53))')),
    script_probe("net_dns", "resolve example.com",
                 'try:\n    say(True, socket.getaddrinfo("example.com", 80)[0][4])\n'
                 'except OSError as e:\n    say(False, e)\n'),
    server_probe("net_host_loopback_tcp", "tcp", "TCP to a server listening on the host's "
                 "127.0.0.1", CONNECT % ("", 'connect(("127.0.0.1", V["tcp_port"]))')),
    server_probe("net_host_loopback_udp", "udp", "UDP to a server on the host's 127.0.0.1",
                 CONNECT % ("socket.AF_INET, socket.SOCK_DGRAM",
                            'sendto(b"x", ("127.0.0.1", V["udp_port"]))')),
    server_probe("net_host_unix_socket", "unix", "a world-connectable Unix socket of the host "
                 "(mode 0777 in /var/tmp)", CONNECT % ("socket.AF_UNIX",
                                                      'connect(V["unix_path"])')),
    server_probe("net_host_abstract_socket", "abstract", "an abstract Unix socket the host "
                 "listens on", CONNECT % ("socket.AF_UNIX", 'connect(V["abstract"])')),
]

# -- the trainer's secrets and processes ------------------------------------------------------

ENVIRON = '''
import glob
for path in glob.glob("/proc/[0-9]*/environ"):
    try:
        print(path, open(path, "rb").read().replace(b"\\0", b" ").decode(errors="replace"))
    except OSError:
        pass
print("RAN")
'''


async def _sibling_probe(bench: Bench) -> Verdict:
    sibling = bench.workspace()
    (sibling / "notes.txt").write_text(bench.token)
    ws = bench.workspace()
    out = await bench.sh(f"cat ../{sibling.name}/notes.txt {sibling}/notes.txt; ls ..; echo RAN",
                         ws)
    return token_verdict(bench, out, "another rollout's workspace")


async def _proc_probe(bench: Bench) -> Verdict:
    return marker_verdict(await bench.sh(py(bench, '''
pid = V["pid"]
try:
    cmd = open(f"/proc/{pid}/cmdline", "rb").read()
except OSError as e:
    cmd = b""
pids = [p for p in os.listdir("/proc") if p.isdigit()]
say(b"sandbox_escapes" in cmd, f"trainer pid {pid}: cmdline {cmd[:40]!r}; {len(pids)} pids seen")
try:
    os.kill(pid, 0)
    say(True, f"could signal the trainer (pid {pid})")
except OSError as e:
    say(False, f"signal the trainer: {e}")
''')))


SECRETS = [
    Probe("env_secret", "shell", "the trainer's secret env var, in our env or any "
          "/proc/*/environ", lambda b: _env_probe(b)),
    secret_probe("file_secret_private", "the trainer's 0600 key file outside the workspace",
                 lambda b: f"cat {b.secret_private}", "a 0600 file of the trainer"),
    secret_probe("file_secret_world_readable", "a world-readable secret (job.env) outside the "
                 "workspace", lambda b: f"cat {b.secret_world}", "a world-readable file"),
    secret_probe("symlink_to_secret", "a symlink in the workspace to the secret file",
                 lambda b: f"ln -s {b.secret_world} leak; cat leak", "a symlink"),
    secret_probe("hardlink_to_secret", "hard links from the workspace to host files",
                 lambda b: f"for f in {b.secret_world} {b.secret_private} /etc/passwd; do "
                           "ln $f hl_$(basename $f) 2>&1; done; cat hl_*",
                 "a hard link"),
    Probe("sibling_workspace", "shell", "another rollout's workspace next to ours",
          _sibling_probe),
    Probe("proc_of_the_trainer", "shell", "/proc of the trainer process, and signalling it",
          _proc_probe),
]


async def _env_probe(bench: Bench) -> Verdict:
    out = await bench.sh("env; " + py(bench, ENVIRON))
    return token_verdict(bench, out, "an environment")

# -- writes outside the workspace, links the host follows ---------------------------------------


async def _write_probe(bench: Bench) -> Verdict:
    name = f"arft-escape-{os.getpid()}"
    targets = [bench.world_dir / name, bench.host_tmp / name, bench.secret_private.parent / name,
               Path("/etc") / name, Path(__file__).resolve().parents[1] / name]
    out = await bench.sh("; ".join(f"echo x > {t}" for t in targets) + "; echo RAN")
    written = [str(t) for t in targets if t.exists()]
    for t in written:
        Path(t).unlink()
    if written:
        return Verdict(True, f"wrote {', '.join(written)}")
    if "RAN" not in out:
        return Verdict(None, f"the probe did not run: {out[-200:]!r}")
    return Verdict(False, f"{len(targets)} world-writable and trainer folders untouched")


async def _chown_probe(bench: Bench) -> Verdict:
    """Links planted in the workspace must not make the next call hand host files over."""
    victim = bench.secret_private.parent / "owned.txt"
    victim.write_text("the trainer's")
    before = victim.stat()
    ws = bench.workspace()
    await bench.sh(f"ln -s {victim} soft; ln {victim} hard 2>/dev/null; mkdir d; "
                   f"ln -s {victim.parent} d/dirlink; echo RAN", ws)
    await bench.sh("ls -la > /dev/null", ws)  # the next call prepares the workspace again
    after = victim.stat()
    if (after.st_uid, after.st_gid, after.st_mode) != (before.st_uid, before.st_gid,
                                                        before.st_mode):
        return Verdict(True, f"{victim} changed owner or mode")
    return Verdict(False, "owner and mode of the linked host file unchanged")


WRITES = [
    Probe("write_outside_workspace", "shell", "write into world-writable host folders, the "
          "trainer's folder, /etc and the repo", _write_probe),
    Probe("links_hand_over_host_files", "shell", "symlinks and hard links to a host file, then "
          "another call (which chowns the workspace when root)", _chown_probe),
]

# -- resource bombs -----------------------------------------------------------------------------


FILL = '''
def fill(folder, mib):
    """Write up to ``mib`` MiB into ``folder`` (32 MiB a file); how many were written."""
    written = 0
    try:
        for i in range(mib):
            with open(f"{folder}/fill{i // 32}", "ab") as f:
                f.write(bytes(1 << 20))
            written += 1
    except OSError:
        pass
    return written
'''


def tagged_probe(name: str, what: str, command: str, max_s: float) -> Probe:
    """A command whose processes carry a tag: none may survive the call, which must end in
    ``max_s`` seconds."""
    async def run(bench: Bench) -> Verdict:
        tag = f"arft-probe-{name}-{os.getpid()}"
        start = time.monotonic()
        out = await bench.sh(command.replace("TAG", tag))
        took = time.monotonic() - start
        left = await survivors(tag)
        for pid in left:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        if left or took > max_s:
            return Verdict(True, f"{len(left)} processes outlived the call; it took {took:.0f} s")
        return Verdict(False, f"ended after {took:.1f} s, nothing left ({out.strip()[-60:]!r})")
    return Probe(name, "shell", what, run)


async def _disk_file_probe(bench: Bench) -> Verdict:
    ws = bench.workspace()
    await bench.sh("head -c 300M /dev/zero > big; ls -la big", ws)
    size = (ws / "big").stat().st_size if (ws / "big").exists() else 0
    return Verdict(size > 64 << 20, f"one file grew to {size >> 20} MiB (cap 64)")


BOMBS = [
    tagged_probe("fork_bomb", "a bash fork bomb", "exec -a TAG bash -c ':(){ :|:& };:'", 25),
    tagged_probe("leftover_daemon", "a daemon started with setsid/nohup, to outlive the call",
                 "setsid nohup bash -c 'exec -a TAG sleep 600' >/dev/null 2>&1 & "
                 "nohup bash -c 'exec -a TAG sleep 600' >/dev/null 2>&1 & echo started", 15),
    tagged_probe("shell_ignores_signals", "a busy loop that ignores TERM/INT/HUP, to outlast "
                 "the 10 s limit", "exec -a TAG bash -c 'trap \"\" TERM INT HUP; "
                 "while :; do :; done'", 25),
    script_probe("memory_bomb", "allocate and touch 4 GiB (the shell tool allows 512 MiB)", '''
try:
    block = bytearray(4 << 30)
    for i in range(0, len(block), 1 << 16):
        block[i] = 1
    say(True, "allocated and touched 4 GiB")
except MemoryError:
    say(False, "MemoryError")
'''),
    Probe("disk_bomb_one_file", "shell", "a 300 MiB file in the workspace", _disk_file_probe),
    script_probe("disk_bomb_tmp", "fill /tmp with 1 GiB", FILL + '''
written = fill("/tmp", 1024)
say(written > 100, f"{written} MiB written to /tmp")
'''),
]

# -- IPC across runs ----------------------------------------------------------------------------

def _sysv_script(step: str) -> str:
    make = step == "make"
    flags = "0o1666" if make else "0"
    return f'''
key = 0x41524654
ids = [libc.shmget(key, 4096 if {make} else 0, {flags}), libc.semget(key + 1, 1 if {make} else 0,
       {flags}), libc.msgget(key + 2, {flags})]
print("ids", ids)
say({not make} and max(ids) >= 0, f"SysV objects of the earlier run: {{ids}}")
'''


async def _sysv_runs_probe(bench: Bench) -> Verdict:
    await bench.sh(py(bench, _sysv_script("make")))
    with open("/proc/sysvipc/shm") as f:
        on_host = any(line.split()[0] == str(0x41524654) for line in f.readlines()[1:])
    if on_host:
        return Verdict(True, "the sandbox's shared memory segment exists on the host")
    return marker_verdict(await bench.sh(py(bench, _sysv_script("look"))))


IPC = [Probe("ipc_sysv_across_runs", "shell", "SysV shm/sem/msg made in one shell call, looked "
             "for in the next (and on the host)", _sysv_runs_probe)]

# -- syscalls a command never needs ---------------------------------------------------------------

ABI32 = '''
import mmap
if platform.machine() != "x86_64":
    say(False, "n/a: not x86_64")
    sys.exit()
# push rbx; mov eax, 26 (i386 ptrace); xor ebx, ebx (TRACEME); int 0x80; pop rbx; ret
code = bytes.fromhex("53b81a00000031dbcd805bc3")
mem = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
mem.write(code)
call = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(mem)))
pid = os.fork()
if pid == 0:
    os._exit(0 if call() == 0 else 1)
_, status = os.waitpid(pid, 0)
if os.WIFSIGNALED(status):
    say(False, f"killed by signal {os.WTERMSIG(status)} (31 = SIGSYS: the filter)")
else:
    say(os.WEXITSTATUS(status) == 0, "32-bit ptrace(TRACEME) through int 0x80")
'''

SYSCALLS = [
    script_probe("ptrace_a_process", "PTRACE_ATTACH to our own child", '''
pid = sleeper()
ret, err = sc("ptrace", 16, pid, 0, 0)
os.kill(pid, 9)
say(ret == 0, f"PTRACE_ATTACH -> {ret} {err}")
'''),
    script_probe("process_vm_readv", "read another process's memory", '''
class Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
src, dst = ctypes.create_string_buffer(b"arft", 16), ctypes.create_string_buffer(16)
pid = sleeper()
ret, err = sc("process_vm_readv", pid, ctypes.byref(Iov(ctypes.addressof(dst), 16)), 1,
              ctypes.byref(Iov(ctypes.addressof(src), 16)), 1, 0)
os.kill(pid, 9)
say(ret > 0, f"process_vm_readv -> {ret} {err}")
'''),
    script_probe("unshare_user_and_mount", "a new user+mount namespace, then mount a tmpfs", '''
ret, err = sc("unshare", 0x10000000 | 0x00020000)
if ret == 0:
    say(True, f"unshare worked; mount -> {libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)}")
else:
    say(False, f"unshare(NEWUSER|NEWNS) -> {err}")
'''),
    script_probe("clone_new_namespaces", "clone(CLONE_NEWUSER|CLONE_NEWNET), bypassing unshare", '''
ret, err = sc("clone", 0x10000000 | 0x40000000 | 17, 0, 0, 0, 0)
if ret == 0:
    os._exit(0)
if ret > 0:
    os.waitpid(ret, 0)
say(ret >= 0, f"clone -> {ret} {err}")
'''),
    script_probe("mount_tmpfs", "mount a tmpfs over /tmp", '''
ret, err = sc("mount", b"none", b"/tmp", b"tmpfs", 0, None)
say(ret == 0, f"mount -> {ret} {err}")
'''),
    script_probe("chroot", "chroot into /tmp", 'ret, err = sc("chroot", b"/tmp")\n'
                 'say(ret == 0, f"chroot -> {ret} {err}")\n'),
    script_probe("bpf_map", "create a BPF map", '''
attr = (ctypes.c_uint32 * 32)(2, 4, 4, 1)
fd_probe("bpf", 0, ctypes.byref(attr), ctypes.sizeof(attr))
'''),
    script_probe("keyctl", "add a key to, and read, the session keyring", '''
r1, e1 = sc("add_key", b"user", b"arft-probe", b"secret", 6, -3)
r2, e2 = sc("keyctl", 0, -3, 0)
say(r1 >= 0 or r2 >= 0, f"add_key -> {r1} {e1}; keyctl(GET_KEYRING_ID) -> {r2} {e2}")
'''),
    script_probe("perf_event_open", "a user-space perf counter", '''
attr = (ctypes.c_uint8 * 128)()
ctypes.c_uint32.from_buffer(attr, 0).value = 1
ctypes.c_uint32.from_buffer(attr, 4).value = 128
ctypes.c_uint64.from_buffer(attr, 40).value = (1 << 5) | (1 << 6)
fd_probe("perf_event_open", ctypes.byref(attr), 0, -1, -1, 0)
'''),
    script_probe("userfaultfd", "a user-mode userfaultfd", 'fd_probe("userfaultfd", 1)\n'),
    script_probe("io_uring", "an io_uring instance",
                 'fd_probe("io_uring_setup", 1, ctypes.byref((ctypes.c_uint8 * 120)()))\n'),
    script_probe("kernel_module", "load a kernel module", '''
r1, e1 = sc("init_module", None, 0, b"")
r2, e2 = sc("finit_module", 0, b"", 0)
say(r1 == 0 or r2 == 0, f"init_module -> {e1}; finit_module -> {e2}")
'''),
    script_probe("open_by_handle_at", "open a file by handle (the 'shocker' escape)", '''
handle = (ctypes.c_uint8 * 136)()
ctypes.c_uint32.from_buffer(handle, 0).value = 8
fd_probe("open_by_handle_at", -100, ctypes.byref(handle), 0)
'''),
    script_probe("syscall_abi_32bit", "the denied ptrace through the 32-bit syscall table "
                 "(int 0x80)", ABI32),
    script_probe("become_root", "setuid(0), and sudo -n", '''
import shutil, subprocess
try:
    os.setuid(0)
    say(True, "setuid(0) worked")
except OSError as e:
    say(False, f"setuid(0): {e}")
if shutil.which("sudo"):
    done = subprocess.run(["sudo", "-n", "id", "-u"], capture_output=True, text=True)
    say(done.stdout.strip() == "0", f"sudo -n: {done.stderr.strip()[:60]}")
'''),
]


async def _hostname_probe(bench: Bench) -> Verdict:
    before = socket.gethostname()
    out = await bench.sh(py(bench, 'ret, err = sc("sethostname", b"arft-escape", 11)\n'
                                   'say(False, f"sethostname -> {ret} {err}")\n'))
    if socket.gethostname() != before:
        return Verdict(True, f"the host is now called {socket.gethostname()!r}")
    return marker_verdict(out)


SYSCALLS.append(Probe("host_name", "shell", "rename the host", _hostname_probe))


SHELL_PROBES = [*NETWORK, *SECRETS, *WRITES, *BOMBS, *IPC, *SYSCALLS]
