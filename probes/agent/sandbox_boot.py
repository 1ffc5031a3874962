"""The sandbox's first process, run as `python -I -S sandbox_boot.py SPEC_JSON -- BWRAP_ARGV...`.

Kept to the standard library and free of imports from this project. It does what must happen
before bubblewrap starts and that bubblewrap does not do: join the run's cgroups (only root can
write their member lists), set the rlimits, and, when it runs as root, drop to the sandbox's
unprivileged uid and gid with no supplementary groups (so the user namespace bubblewrap creates maps
to that uid, not to root) and check that root cannot be regained. Then `no_new_privs` and a
parent-death SIGKILL (a gateway killed while the sandbox starts leaves nothing behind), and it
execs bubblewrap in its place. Any failure exits with REFUSED before anything of the run starts.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys

REFUSED = 97  # isolation could not be set up: the target never ran
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
SIGKILL = 9

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
    sys.stderr.flush()
    os._exit(REFUSED)


def _drop_to(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        _refuse("the privilege drop did not take")
    try:
        os.setuid(0)
    except PermissionError:
        return
    _refuse("root could be regained after the privilege drop")


def main() -> None:
    spec = json.loads(sys.argv[1])
    argv = sys.argv[sys.argv.index("--") + 1 :]
    try:
        for procs in spec.get("cgroup_procs") or ():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        for name, (soft, hard) in dict(spec["limits"]).items():
            resource.setrlimit(_LIMITS[name], (soft, hard))
        drop = spec.get("drop_to")
        if drop is not None:
            _drop_to(int(drop[0]), int(drop[1]))
        elif os.geteuid() == 0:
            _refuse("running as root without a uid to drop to")
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            _refuse(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
        # Die with the gateway from here on (a credential change clears this, so after the drop;
        # exec keeps it), and not start at all if the gateway died before this line.
        if libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 or os.getppid() != int(spec["parent"]):
            _refuse("the gateway is gone")
        os.execve(argv[0], argv, {})
    except OSError as exc:
        _refuse(f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    main()
