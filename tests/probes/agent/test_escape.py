"""Attacks on the sandbox, from model-written code, run by a gateway process (`gateway_harness`)
that holds a secret in its environment and a hidden directory as its working directory: once as
root and once as an unprivileged user (`gwsandbox-test`, created when missing). Every attack must
fail, and the same sandbox must still grade a correct solution as passing."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from probes.agent.sandbox import tasks_of_uid
from tests.probes.agent.conftest import solution
from tests.probes.agent.test_grader import ATTACKS, WRONG
from tests.probes.agent.test_grading_isolation import ATTACKS as GRADING_ATTACKS

REPO = Path(__file__).resolve().parents[3]
HARNESS = Path(__file__).with_name("gateway_harness.py")
SITE = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "pyseccomp.py").exists())
TEST_USER = "gwsandbox-test"
SECRET = "sk-escape-" + secrets.token_hex(8)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@dataclass
class Gateway:
    """How to start the stand-in gateway as one kind of user."""
    name: str
    uid: int
    gid: int
    python: str
    home: Path  # the gateway's hidden working directory, with a secret file in it
    install: Path  # where its code is: the repository, or a copy that user can read
    started: list[subprocess.Popen[str]]

    def start(self, request: dict[str, Any]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [self.python, "-I", "-S", str(self.install / HARNESS.name), str(self.install), str(self.install)],
            cwd=self.home, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={"GW_ADMIN_KEY": SECRET, "DATABASE_URL": f"postgresql://gw:{SECRET}@db/gw", "PATH": "/usr/bin:/bin"},
            **({} if self.uid == os.geteuid() else {"user": self.uid, "group": self.gid, "extra_groups": []}),
        )
        self.started.append(proc)
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(request))
        proc.stdin.close()
        return proc

    def run(self, code: str, *args: object, **limits: Any) -> dict[str, Any]:
        proc = self.start({"code": code, "args": [str(a) for a in args], "limits": limits})
        out, err = finish(proc)
        assert proc.returncode == 0 and out.strip(), err
        result: dict[str, Any] = json.loads(out)
        assert "unavailable" not in result, result["unavailable"]
        return result


def finish(proc: subprocess.Popen[str]) -> tuple[str, str]:
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.wait(timeout=60)
    return out, err


def _ensure_test_user() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", TEST_USER], check=True)
        entry = pwd.getpwnam(TEST_USER)
    return entry.pw_uid, entry.pw_gid


def _install_for(into: Path) -> Path:
    """The gateway's code where any user can read it: the repository (and its virtualenv) may sit
    under a 0700 home. The harness needs `probes` and `pyseccomp` only."""
    shutil.copytree(REPO / "probes", into / "probes", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(Path(SITE) / "pyseccomp.py", into / "pyseccomp.py")
    shutil.copy(HARNESS, into / HARNESS.name)
    for path in (into, *into.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return into


def _python_for(uid: int) -> str:
    """This interpreter where that user can run it, else the system's (a root-only pyenv, say)."""
    if uid == os.geteuid():
        return sys.executable
    try:
        subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], user=uid, capture_output=True, check=True)
        return sys.executable
    except (OSError, subprocess.CalledProcessError):
        return "/usr/bin/python3"


@pytest.fixture(params=["root", "unprivileged"], scope="module")
def gateway_kind(request: pytest.FixtureRequest) -> Iterator[Gateway]:
    root = os.geteuid() == 0
    if request.param == "root" and not root:
        if IN_CI:
            pytest.fail("the escape suite must run as root under CI")
        pytest.skip("needs root")
    uid, gid = (0, 0) if request.param == "root" else _ensure_test_user() if root else (os.getuid(), os.getgid())
    home = Path(tempfile.mkdtemp(prefix="gw-hidden-home-"))
    (home / "config-secret.yaml").write_text(f"admin_key: {SECRET}\n")
    os.chown(home, uid, gid)
    os.chown(home / "config-secret.yaml", uid, gid)
    install = Path(tempfile.mkdtemp(prefix="gw-install-"))
    try:
        yield Gateway(request.param, uid, gid, _python_for(uid), home, _install_for(install), [])
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(install, ignore_errors=True)


@pytest.fixture
def gateway(gateway_kind: Gateway) -> Iterator[Gateway]:
    """The kind of gateway, with every process a test started stopped after it."""
    gw = Gateway(gateway_kind.name, gateway_kind.uid, gateway_kind.gid, gateway_kind.python, gateway_kind.home,
                 gateway_kind.install, [])
    try:
        yield gw
    finally:
        for proc in gw.started:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


@pytest.fixture
def host_target(gateway: Gateway) -> Iterator[Path]:
    """A host file the gateway's user could write, which the sandbox must not."""
    d = Path(tempfile.mkdtemp(prefix="gw-host-target-"))
    os.chown(d, gateway.uid, gateway.gid)
    try:
        yield d / "written-by-sandbox"
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _pids_of(gw: Gateway) -> str:
    return ",".join(str(p.pid) for p in gw.started)


# Sandboxed code: each attack prints what it managed; the assertions check the host as well.
WALK = (
    "import os, sys, json\n"
    "gateway = [int(p) for p in sys.argv[1].split(',') if p]\n"
    "others = sorted(int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid())\n"
    "pids = list(dict.fromkeys(gateway + [os.getppid(), 1] + others))  # the gateway's first\n"
)


def test_hidden_directory_cannot_be_listed_through_proc_cwd(gateway: Gateway) -> None:
    code = WALK + (
        "seen = {}\n"
        "for pid in pids:\n"
        "    for path in (f'/proc/{pid}/cwd', f'/proc/{pid}/root' + sys.argv[2]):\n"
        "        try:\n"
        "            seen[path] = os.listdir(path)\n"
        "        except OSError as e:\n"
        "            seen[path] = type(e).__name__\n"
        "try:\n    seen['direct'] = os.listdir(sys.argv[2])\nexcept OSError as e:\n    seen['direct'] = type(e).__name__\n"
        "print(json.dumps(seen))\n"
    )
    gateway.start({"code": "import time; time.sleep(30)", "limits": {"wall_seconds": 30}})  # a second gateway-owned process
    time.sleep(0.2)
    result = gateway.run(code, _pids_of(gateway), gateway.home)
    assert result["exit_code"] == 0, result["stderr"]
    assert "config-secret.yaml" not in result["stdout"]


def test_gateway_environment_cannot_be_read(gateway: Gateway) -> None:
    code = WALK + (
        "got = []\n"
        "for pid in pids[:8]:  # the gateway's and the parents': all of /proc would overflow the output cap\n"
        "    for name in ('environ', 'cmdline'):\n"
        "        try:\n"
        "            got.append(open(f'/proc/{pid}/{name}', 'rb').read().decode(errors='replace'))\n"
        "        except OSError as e:\n"
        "            got.append(type(e).__name__)\n"
        "print(json.dumps(got))\n"
    )
    gateway.start({"code": "import time; time.sleep(30)", "limits": {"wall_seconds": 30}})
    time.sleep(0.2)
    result = gateway.run(code, _pids_of(gateway))
    assert result["exit_code"] == 0, result["stderr"]
    assert SECRET not in result["stdout"] + result["stderr"]


def test_host_file_cannot_be_written_through_proc_root(gateway: Gateway, host_target: Path) -> None:
    code = WALK + (
        "done = []\n"
        "for pid in pids:\n"
        "    try:\n"
        "        open(f'/proc/{pid}/root' + sys.argv[2], 'w').write('pwned')\n"
        "        done.append(pid)\n"
        "    except OSError:\n"
        "        pass\n"
        "print(done)\n"
    )
    result = gateway.run(code, _pids_of(gateway), host_target)
    assert result["exit_code"] == 0, result["stderr"]
    assert not host_target.exists()


def test_mounts_cannot_be_undone(gateway: Gateway) -> None:
    code = (
        "import ctypes, os, json, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "targets = [line.split()[1] for line in open('/proc/self/mounts')][::-1]\n"
        "out = {}\n"
        "for t in targets:\n"
        "    for flags in (0, 2):  # plain, MNT_DETACH\n"
        "        rc = libc.umount2(t.encode(), flags)\n"
        "        out[f'{t}:{flags}'] = rc if rc == 0 else os.strerror(ctypes.get_errno())\n"
        "rc = libc.mount(b'none', b'/sandbox', b'tmpfs', 0, None)\n"
        "out['mount'] = rc if rc == 0 else os.strerror(ctypes.get_errno())\n"
        "try:\n    out['hidden'] = os.listdir(sys.argv[1])\nexcept OSError as e:\n    out['hidden'] = type(e).__name__\n"
        "print(json.dumps(out))\n"
    )
    result = gateway.run(code, gateway.home)
    assert result["exit_code"] == 0, result["stderr"]
    out = json.loads(result["stdout"])
    assert out and all(v != 0 for v in out.values()), out
    assert "config-secret.yaml" not in result["stdout"]


def test_host_network_cannot_be_reached_by_setns(gateway: Gateway) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        code = WALK + (
            "import ctypes, socket\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "joined = []\n"
            "for pid in pids:\n"
            "    try:\n"
            "        fd = os.open(f'/proc/{pid}/ns/net', os.O_RDONLY)\n"
            "    except OSError:\n"
            "        continue\n"
            "    if libc.setns(fd, 0x40000000) == 0:\n"
            "        joined.append(pid)\n"
            "        break\n"
            "out = {'joined': joined}\n"
            "try:\n"
            "    socket.create_connection(('127.0.0.1', int(sys.argv[2])), timeout=2).close()\n"
            "    out['connect'] = 'connected'\n"
            "except OSError as e:\n"
            "    out['connect'] = e.errno\n"
            "print(json.dumps(out))\n"
        )
        result = gateway.run(code, _pids_of(gateway), port)
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing reached the host's loopback
    assert result["exit_code"] == 0, result["stderr"]
    assert json.loads(result["stdout"])["connect"] != "connected"


def test_parent_cannot_be_traced(gateway: Gateway) -> None:
    code = WALK + (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]\n"
        "attached = [pid for pid in pids if pid != os.getpid() and "
        "any(libc.ptrace(req, pid, None, None) == 0 for req in (16, 0x4206))]  # ATTACH, SEIZE\n"
        "print(json.dumps(attached))\n"
    )
    result = gateway.run(code, _pids_of(gateway))
    assert result["exit_code"] == 0, result["stderr"]
    assert json.loads(result["stdout"]) == []


def test_etc_shadow_cannot_be_read(gateway: Gateway) -> None:
    code = "try:\n    print(open('/etc/shadow').read())\nexcept OSError as e:\n    print(type(e).__name__)\n"
    result = gateway.run(code)
    assert result["exit_code"] == 0, result["stderr"]
    assert "root:" not in result["stdout"] and result["stdout"].strip() in ("FileNotFoundError", "PermissionError")


def test_nothing_outside_scratch_can_be_written(gateway: Gateway, host_target: Path) -> None:
    marker = f"escape-{secrets.token_hex(4)}"
    code = (
        "import sys, json\n"
        "written = []\n"
        f"for path in (sys.argv[1], '/tmp/{marker}', '/dev/shm/{marker}', '/{marker}', '/usr/{marker}', '/proc/{marker}'):\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "        written.append(path)\n"
        "    except OSError:\n"
        "        pass\n"
        "print(json.dumps(written))\n"
    )
    result = gateway.run(code, host_target)
    assert result["exit_code"] == 0, result["stderr"]
    assert json.loads(result["stdout"]) == []
    assert not host_target.exists() and not Path(f"/tmp/{marker}").exists() and not Path(f"/dev/shm/{marker}").exists()


def test_scratch_cannot_be_filled_past_its_limit(gateway: Gateway) -> None:
    limit = 8 * 1024 * 1024
    code = (
        "import os\n"
        "total, error = 0, None\n"
        "chunk = b'x' * (1024 * 1024)\n"
        "try:\n"
        "    for i in range(64):\n"
        "        with open(f'fill-{i}', 'wb') as f:\n"
        "            f.write(chunk)\n"
        "            f.flush()\n"
        "            os.fsync(f.fileno())\n"
        "        total += len(chunk)\n"
        "except OSError as e:\n"
        "    error = e.errno\n"
        "print(total, error)\n"
    )
    result = gateway.run(code, scratch_bytes=limit)
    assert result["exit_code"] == 0, result["stderr"]
    total, error = result["stdout"].split()
    assert int(total) <= limit and error == "28", result["stdout"]  # ENOSPC


def _survivors(marker: str, *also: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                if all(word.encode() in cmdline for word in (marker, *also)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _host_uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[2])  # effective
    raise AssertionError(f"no Uid line for {pid}")


def _wait_for(predicate: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_fork_bomb_is_capped_and_leaves_no_process(gateway: Gateway) -> None:
    marker = f"fork-bomb-{secrets.token_hex(4)}"
    code = (
        "import os, time\n"
        "n = 0\n"
        "while n < 10000:\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    n += 1\n"
        "print(n, flush=True)\n"
    )
    if gateway.uid not in (0, os.getuid()):
        # Without a pids cgroup the budget is the limit above the tasks the uid runs at the start:
        # an earlier test's processes of this user still ending during the forks would add to it.
        assert _wait_for(lambda: tasks_of_uid(gateway.uid) == 0, 30), "earlier tasks of the test user stay"
    # A long wall clock: the cap is under test here, not the speed of a loaded machine.
    result = gateway.run(code, marker, processes=16, wall_seconds=120)
    assert result["exit_code"] == 0, result
    assert 0 < int(result["stdout"]) < 16, result
    assert _wait_for(lambda: _survivors(marker) == [], 30), _survivors(marker)


def test_four_gib_cannot_be_allocated(gateway: Gateway) -> None:
    code = (
        "try:\n"
        "    block = bytearray(4 * 1024 ** 3)\n"
        "    block[::4096] = b'x' * len(block[::4096])\n"
        "    print('allocated')\n"
        "except MemoryError:\n"
        "    print('refused')\n"
    )
    result = gateway.run(code, memory_bytes=256 * 1024 * 1024)
    assert "allocated" not in result["stdout"]
    assert result["stdout"].strip() == "refused" or result["killed_by"] == "memory", result


def test_a_sleeping_child_dies_with_the_gateway(gateway: Gateway) -> None:
    marker = f"sleeper-{secrets.token_hex(4)}"
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', sys.argv[1]])\n"
        "    os._exit(0)\n"
        "time.sleep(120)\n"
    )
    proc = gateway.start({"code": code, "args": [marker], "limits": {"wall_seconds": 120}})
    assert _wait_for(lambda: bool(_survivors(marker, "time.sleep(120)")), 60), "no sleeper started"
    (sleeper,) = _survivors(marker, "time.sleep(120)")
    assert _host_uid(sleeper) != 0, "the sandboxed code runs as root on the host"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _wait_for(lambda: _survivors(marker) == [], 10), f"survived the gateway: {_survivors(marker)}"


def test_a_correct_solution_still_passes(gateway: Gateway) -> None:
    proc = gateway.start({"grade": "roman", "source": solution("roman")})
    out, err = finish(proc)
    assert proc.returncode == 0, err
    assert json.loads(out) == {"passed": True, "stage": "passed", "reason": None}


STDOUT_ATTACKS = ("redirect stdout through a pipe", "close stdout and take its number", "read back and rewrite stdout",
                  "reopen stdout and rewrite it")


@pytest.mark.parametrize("attack", STDOUT_ATTACKS)
def test_the_result_stream_cannot_be_rewritten(gateway: Gateway, attack: str) -> None:
    # As the gateway's user too: what fd 1 is (file, pipe, socket) decides whether it reopens.
    proc = gateway.start({"grade": "roman", "source": ATTACKS[attack] + WRONG})
    out, err = finish(proc)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["passed"] is False and result["stage"] in ("run", "behaviour"), result


@pytest.mark.parametrize("attack", sorted(GRADING_ATTACKS))
def test_a_wrong_solution_cannot_forge_its_grade(gateway: Gateway, attack: str) -> None:
    # The attacks that forged a pass when the checks ran in the solution's process, by either user.
    task, source = GRADING_ATTACKS[attack]
    proc = gateway.start({"grade": task, "source": source})
    out, err = finish(proc)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["passed"] is False and result["stage"] in ("run", "behaviour"), result
