"""The sandbox's first process, run as `python -I -S sandbox_boot.py SPEC_JSON -- ARGV...`.

Kept to the standard library and free of imports from this project: it runs before isolation is
in place. In order, it joins the pids cgroup (a fork bomb's ceiling: RLIMIT_NPROC does not bind
root), enters new network and mount namespaces when asked (`os.unshare`, Python 3.12+; otherwise
the parent started it under the `unshare` tool), checks that both differ from the parent's, makes
every mount read-only except the scratch dir, sets the rlimits, and only then reports "ready" on
the status pipe. It then runs the target as its child and reports the child's raw wait status on
the same pipe, so the parent can tell the target's own exit code from a failed start and from a
signal, whatever namespace tools sit in between.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys

REFUSED = 97  # isolation could not be set up: the target never ran

_LIMITS = {
    "cpu": resource.RLIMIT_CPU,
    "as": resource.RLIMIT_AS,
    "fsize": resource.RLIMIT_FSIZE,
    "nproc": resource.RLIMIT_NPROC,
    "nofile": resource.RLIMIT_NOFILE,
    "core": resource.RLIMIT_CORE,
}


def _refuse(message: str) -> None:
    sys.stderr.write(f"sandbox: {message}\n")
    sys.exit(REFUSED)


_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_KEPT_FLAGS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC}


def _mount(libc: ctypes.CDLL, source: str | None, target: str, flags: int) -> None:
    src = source.encode() if source else None
    if libc.mount(src, target.encode(), None, ctypes.c_ulong(flags), None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _read_only_except(scratch: str) -> None:
    """In this (new, private) mount namespace: every mount read-only, except the scratch dir."""
    libc = ctypes.CDLL(None, use_errno=True)
    _mount(libc, None, "/", _MS_REC | _MS_PRIVATE)
    _mount(libc, scratch, scratch, _MS_BIND)
    with open("/proc/self/mounts") as f:
        mounts = [line.split() for line in f]
    for fields in mounts:
        target = fields[1].replace("\\040", " ")
        if target == scratch:
            continue
        kept = sum(flag for name, flag in _KEPT_FLAGS.items() if name in fields[3].split(","))
        _mount(libc, None, target, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | kept)
    os.chdir(scratch)  # the old cwd is the directory under the bind mount, now read-only


def _hide(paths: list[str]) -> None:
    """An empty, read-only tmpfs over each directory the code must not read."""
    libc = ctypes.CDLL(None, use_errno=True)
    for path in paths:
        if os.path.isdir(path):
            if libc.mount(b"tmpfs", path.encode(), b"tmpfs", ctypes.c_ulong(_MS_RDONLY | _MS_NOSUID | _MS_NODEV),
                          b"size=4k,mode=555") != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mount tmpfs on {path}: {os.strerror(err)}")


def _isolate(spec: dict[str, object]) -> None:
    cgroup = spec.get("cgroup_procs")
    if cgroup:
        try:
            with open(str(cgroup), "w") as f:
                f.write("0")  # "0" is this process, whatever PID namespace it sees
        except OSError as exc:
            _refuse(f"cannot join the pids cgroup: {exc}")
    if spec.get("unshare"):
        try:
            os.unshare(os.CLONE_NEWNET | os.CLONE_NEWNS)  # type: ignore[attr-defined]
        except (AttributeError, OSError) as exc:
            _refuse(f"cannot enter new network and mount namespaces: {exc}")
    for ns in ("net", "mnt"):
        if os.readlink(f"/proc/self/ns/{ns}") == spec["parent_ns"][ns]:  # type: ignore[index]
            _refuse(f"still in the parent's {ns} namespace")
    try:
        _read_only_except(str(spec["scratch"]))
        _hide([str(p) for p in spec.get("hide") or ()])  # type: ignore[union-attr]
    except OSError as exc:
        _refuse(f"cannot make the file system read-only: {exc}")
    for name, value in dict(spec["limits"]).items():  # type: ignore[call-overload]
        soft, hard = value
        resource.setrlimit(_LIMITS[name], (soft, hard))


def main() -> None:
    spec = json.loads(sys.argv[1])
    target = sys.argv[sys.argv.index("--") + 1 :]
    status_fd = int(spec["status_fd"])
    os.set_inheritable(status_fd, False)  # the target never sees the status pipe
    _isolate(spec)
    os.write(status_fd, b"ready\n")
    pid = os.fork()
    if pid == 0:
        try:
            os.execve(target[0], target, dict(spec["env"]))
        finally:
            os._exit(127)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            status = 127 << 8
            break
        except InterruptedError:
            continue
    os.write(status_fd, f"status {status}\n".encode())


if __name__ == "__main__":
    main()
