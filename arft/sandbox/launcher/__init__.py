"""The sandbox launcher, run by ``arft.sandbox.command`` as
``python -I -S .../arft/sandbox/launcher CONFIG -- ARGV...`` (the folder: see ``__main__``).

It is a separate, single-threaded, stdlib-only program on purpose: namespace, mount and
credential changes must not happen in the (threaded, possibly huge) trainer process, and
``-I -S`` keeps its start-up to a few milliseconds. It:

1. starts a new session (so the whole process group can be killed as one) and enters the
   workspace (the cwd follows us into the new mount namespace even if the sandbox uid could
   not walk the path);
2. enters new namespaces where the kernel allows it (``namespaces``): directly when root with
   CAP_SYS_ADMIN, else inside a new user namespace (as root: after dropping to nobody);
   network (unless allowed), mount, pid, ipc, uts; it also opens libseccomp (``seccomp``)
   while every file is still readable;
3. forks: the parent stays as a supervisor that waits, reports the exit status on the report
   pipe and then SIGKILLs its whole process group (so nothing the command started survives);
4. the child (pid 1 of the new pid namespace when there is one) makes a private /tmp and
   /dev/shm, hides the ``hidden`` folders behind empty tmpfs (optionally puts a private tmpfs
   on the workspace, empty or a copy of the host folder: ``seed``), makes every other mount
   read-only except the workspace, mounts a fresh /proc and a private /dev/mqueue
   (``mounts``), hands the workspace to the sandbox uid, sets rlimits, drops to the
   unprivileged uid, sets no_new_privs and a parent-death SIGKILL (``credentials``), loads the
   seccomp filter last (``seccomp``: it denies mount, unshare and the like, which the steps
   before needed), and reports the layers it applied (``report``);
5. it forks once more: the grandchild execs ARGV, the child stays as init (reaps orphans)
   and reports the command's exit status (``process_tree``).

Every module is imported when the launcher starts: after the uid drop nothing may be imported
(the interpreter's own files may be closed to the sandbox uid). The config keys are written by
``arft.sandbox.command``. Nothing here may import arft (the modules import each other
relatively, so they work both as ``launcher`` inside the sandbox and as ``arft.sandbox.launcher``).
"""
