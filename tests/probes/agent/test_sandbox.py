"""The real sandbox: runs code, and contains what it must (network, runaway CPU, memory, processes,
file size, output, environment, writes outside its scratch dir); refuses to run without bubblewrap.
The attacks of an escaping solution are in test_escape.py."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from probes.agent import cgroup as cgroup_module
from probes.agent import sandbox as sandbox_module
from probes.agent.cgroup import SandboxCgroup
from probes.agent.sandbox import Limits, SandboxUnavailable, SubprocessSandbox

# Generous wall time: the machine may be loaded; tests about timeouts set their own.
FAST = Limits(wall_seconds=10.0, cpu_seconds=1, memory_bytes=256 * 1024 * 1024, processes=16)


def run(code: str, limits: Limits = FAST, **kwargs: object) -> sandbox_module.SandboxResult:
    return SubprocessSandbox(limits).run({"main.py": code}, "main.py", **kwargs)  # type: ignore[arg-type]


def survivors(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_runs_code_and_captures_output() -> None:
    result = run("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)")
    assert (result.exit_code, result.stdout, result.stderr, result.timed_out) == (3, "out\n", "err\n", False)
    assert result.killed_by is None and not result.ok


def test_isolated_mode_and_empty_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_SANDBOX_SECRET", "do-not-leak")
    result = run("import os, sys\nprint(sys.flags.isolated, sys.flags.no_site, sorted(os.environ))")
    flags, names = result.stdout.split(" ", 2)[:2], result.stdout.split(" ", 2)[2]
    assert flags == ["1", "1"], result.output
    # bwrap sets PWD for --chdir; Python itself sets LC_CTYPE when it coerces the C locale.
    assert set(eval(names)) <= {"PWD", "LC_CTYPE"}, names


def test_scratch_holds_the_files_read_only_and_takes_new_ones() -> None:
    result = SubprocessSandbox(FAST).run(
        {"main.py": "import os, sys\nsys.path.insert(0, '.')  # -I leaves the script's dir out\nimport helper\n"
                    "open('out.txt', 'w').write('ok')\n"
                    "try:\n    open('helper.py', 'w')\nexcept OSError as e:\n    print('task file', e.errno)\n"
                    "print(os.getcwd(), helper.X, sorted(os.listdir('.')))",
         "helper.py": "X = 7"},
        "main.py",
    )
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == ["task file 30", "/sandbox 7 ['__pycache__', 'helper.py', 'main.py', 'out.txt']"] or \
        result.stdout.splitlines() == ["task file 30", "/sandbox 7 ['helper.py', 'main.py', 'out.txt']"]


def test_only_the_allow_list_is_visible() -> None:
    cwd = str(Path.cwd().resolve())  # the repository (configs, databases) while tests run
    code = (
        "import os, json\n"
        "print(json.dumps({'root': sorted(os.listdir('/')), 'etc': os.path.exists('/etc'),\n"
        f"                  'repo': os.path.exists({cwd!r}), 'home': os.path.exists('/root') and os.listdir('/root')}}))\n"
    )
    result = run(code)
    assert result.exit_code == 0, result.stderr
    seen = __import__("json").loads(result.stdout)
    assert set(seen["root"]) <= {"sandbox", "proc", "dev", "usr", "lib", "lib64", "bin", "root"}, seen
    assert seen["etc"] is False and seen["repo"] is False


def test_privileges_are_dropped_and_namespace_calls_denied() -> None:
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "status = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
        "print(status['CapEff'].strip(), status['CapBnd'].strip(), status['NoNewPrivs'].strip(), status['Seccomp'].strip())\n"
        "for name, call in (('unshare', lambda: libc.unshare(0x10000000)), ('keyctl', lambda: libc.syscall(250, 0, 0, 0, 0)),\n"
        "                   ('bpf', lambda: libc.syscall(321, 0, 0, 0)), ('init_module', lambda: libc.syscall(175, 0, 0, 0))):\n"
        "    rc = call()\n"
        "    print(name, rc, ctypes.get_errno())\n"
    )
    result = run(code)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "0000000000000000 0000000000000000 1 2", lines
    assert lines[1:] == [f"{name} -1 1" for name in ("unshare", "keyctl", "bpf", "init_module")]  # EPERM


def test_timeout_leaves_no_process() -> None:
    marker = "timeout-marker"
    result = SubprocessSandbox(Limits(wall_seconds=1.5)).run(
        {"main.py": "import time\nwhile True: time.sleep(0.1)"}, "main.py", args=(marker,))
    assert result.timed_out and result.killed_by == "timeout" and result.exit_code is None
    time.sleep(0.2)
    assert survivors(marker) == []


def test_stop_ends_the_run_and_leaves_no_process() -> None:
    marker = "stop-marker"
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    result = SubprocessSandbox(Limits(wall_seconds=30.0)).run(
        {"main.py": "import time\nwhile True: time.sleep(0.1)"}, "main.py", args=(marker,), stop=stop)
    assert result.killed_by == "stopped" and not result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 10.0  # the stop, not the 30 s wall clock
    time.sleep(0.2)
    assert survivors(marker) == []


def test_passed_fds_reach_the_code_under_their_numbers() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        code = "import socket, sys\ns = socket.socket(fileno=int(sys.argv[1]))\ns.sendall(s.recv(16)[::-1])\n"
        ours.sendall(b"abc")
        result = run(code, args=(str(theirs.fileno()),), pass_fds=(theirs.fileno(),))
        assert result.ok, result.stderr
        assert ours.recv(16) == b"cba"


def test_stdin_reaches_the_code() -> None:
    assert run("print(input()[::-1])", stdin="abc\n").stdout == "cba\n"


def test_network_is_blocked() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        code = (
            "import socket\n"
            f"for host, port in (('127.0.0.1', {port}), ('1.1.1.1', 80), ('8.8.8.8', 53)):\n"
            "    try:\n"
            "        socket.create_connection((host, port), timeout=1).close()\n"
            "        print(host, 'connected')\n"
            "    except OSError as exc:\n"
            "        print(host, 'blocked', exc.errno)\n"
        )
        result = run(code)
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing reached the host's loopback
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and all(" blocked " in line for line in lines), result.output


def test_infinite_loop_is_killed_by_the_cpu_limit() -> None:
    limits = Limits(wall_seconds=8.0, cpu_seconds=1)
    started = time.monotonic()
    result = run("while True: pass", limits)
    # On a loaded machine one CPU second may take longer than the wall limit: either kill counts.
    assert result.killed_by in ("cpu", "timeout") and result.exit_code is None
    assert time.monotonic() - started < limits.wall_seconds + 2


def test_sleeping_loop_is_killed_by_the_wall_clock() -> None:
    started = time.monotonic()
    result = run("import time\nwhile True: time.sleep(1)", Limits(wall_seconds=1.0))
    assert result.timed_out and result.killed_by == "timeout"
    assert time.monotonic() - started < 3


def test_memory_bomb_is_stopped() -> None:
    result = run("chunks = []\nwhile True: chunks.append(bytearray(16 * 1024 * 1024))")
    assert result.killed_by == "memory" and result.exit_code == 1 and not result.timed_out


def test_fork_bomb_is_capped_and_leaves_no_process() -> None:
    marker = "fork-bomb-marker"
    code = (
        f"# {marker}\nimport os, time\n"
        "n = 0\n"
        "while True:\n"
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
    result = SubprocessSandbox(FAST).run({"bomb.py": code}, "bomb.py", args=(marker,))
    assert result.ok, result.output
    assert 0 < int(result.stdout) < FAST.processes
    time.sleep(0.2)
    assert survivors(marker) == []


def test_runaway_fork_loop_is_killed_on_timeout() -> None:
    marker = "fork-loop-marker"
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    started = time.monotonic()
    result = SubprocessSandbox(Limits(wall_seconds=2.0, cpu_seconds=5, processes=16)).run(
        {"loop.py": code}, "loop.py", args=(marker,)
    )
    assert result.timed_out and time.monotonic() - started < 6
    time.sleep(0.2)
    assert survivors(marker) == []


def test_file_size_is_capped() -> None:
    code = (
        "import os\n"
        "try:\n"
        "    with open('big', 'wb') as f:\n"
        "        f.write(b'x' * (8 * 1024 * 1024))\n"
        "except OSError as exc:\n"
        "    print('refused', exc.errno, os.path.getsize('big'))\n"
    )
    result = run(code, Limits(wall_seconds=10.0, file_bytes=1024 * 1024))
    word, errno, size = result.stdout.split()
    assert word == "refused" and int(errno) == 27 and int(size) <= 1024 * 1024


def test_output_is_capped() -> None:
    result = run("print('y' * 1_000_000)", Limits(wall_seconds=10.0, output_bytes=1000))
    assert result.truncated and len(result.stdout) == 1000


def test_writes_outside_the_scratch_dir_fail(tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    result = run(f"open({str(target)!r}, 'w').write('x')")
    assert result.exit_code == 1 and ("Read-only file system" in result.stderr or "No such file" in result.stderr)
    assert not target.exists()


def test_cgroup_is_removed_after_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[SandboxCgroup | None] = []
    real_create = SandboxCgroup.create

    def spy(*args: object) -> SandboxCgroup | None:
        made.append(real_create(*args))  # type: ignore[arg-type]
        return made[-1]

    monkeypatch.setattr(SandboxCgroup, "create", staticmethod(spy))
    assert run("print(1)").ok
    if os.geteuid() == 0:  # root can always make one here; an unprivileged user may have none
        assert made and made[0] is not None and "pids" in made[0].controllers and "memory" in made[0].controllers
    assert all(not d.exists() for c in made if c is not None for d in c.dirs.values())


def test_without_cgroups_the_rlimits_still_cap_a_fork_bomb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SandboxCgroup, "create", staticmethod(lambda *args: None))
    code = "import os\nn = 0\nwhile n < 10000:\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n" \
           "    if pid == 0:\n        import time; time.sleep(30); os._exit(0)\n    n += 1\nprint(n)\n"
    result = SubprocessSandbox(FAST).run({"bomb.py": code}, "bomb.py", args=("rlimit-bomb-marker",))
    assert result.ok, result.output
    assert 0 < int(result.stdout) < FAST.processes
    time.sleep(0.2)
    assert survivors("rlimit-bomb-marker") == []


def test_without_cgroups_the_code_gets_its_budget_beside_other_tasks_of_its_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    # RLIMIT_NPROC counts every task of the uid on the host: another sandbox's processes (a root
    # gateway's sandboxes share one uid) or the gateway's own threads (an unprivileged gateway's).
    monkeypatch.setattr(SandboxCgroup, "create", staticmethod(lambda *args: None))
    # As root, a uid of this test's own: any other sandbox of the host's sandbox uid (a judge, another
    # test run) starting or ending between the count and the forks moved the budget (17 forks of 16).
    private = 61000 + os.getpid() % 3000
    uid = private if os.geteuid() == 0 else os.getuid()
    others = [subprocess.Popen(["sleep", "30"], user=uid) for _ in range(FAST.processes + 4)] if os.geteuid() == 0 else []
    release = threading.Event()
    threads = [] if others else [threading.Thread(target=release.wait) for _ in range(FAST.processes + 4)]
    for t in threads:
        t.start()
    try:
        code = "import os\nn = 0\nwhile n < 10000:\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n" \
               "    if pid == 0:\n        import time; time.sleep(30); os._exit(0)\n    n += 1\nprint(n)\n"
        sandbox = SubprocessSandbox(FAST, sandbox_ids=(uid, uid)) if others else SubprocessSandbox(FAST)
        result = sandbox.run({"bomb.py": code}, "bomb.py", args=("budget-bomb-marker",))
        assert result.ok, result.output
        assert 0 < int(result.stdout) < FAST.processes
    finally:
        release.set()
        for p in others:
            p.kill()
            p.wait()
    time.sleep(0.2)
    assert survivors("budget-bomb-marker") == []


def test_tasks_of_uid_counts_threads_of_that_uid_only(tmp_path: Path) -> None:
    for pid, uid, threads in ((1, 7, 3), (2, 8, 5), (3, 7, 2)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "status").write_text(f"Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nThreads:\t{threads}\n")
    (tmp_path / "self").mkdir()
    assert sandbox_module.tasks_of_uid(7, tmp_path) == 5
    assert sandbox_module.tasks_of_uid(9, tmp_path) == 0


@pytest.mark.parametrize("bwrap", ["/nonexistent/bwrap", None])
def test_refuses_without_bubblewrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bwrap: str | None) -> None:
    monkeypatch.setattr(sandbox_module.shutil, "which", lambda name: None)
    target = tmp_path / "ran"
    with pytest.raises(SandboxUnavailable, match="bwrap"):
        SubprocessSandbox(FAST, bwrap=bwrap).run({"main.py": f"open({str(target)!r}, 'w')"}, "main.py")
    assert not target.exists()


def test_refuses_when_bubblewrap_cannot_start(tmp_path: Path) -> None:
    # A bwrap that fails before it starts anything (as it does without user namespaces).
    with pytest.raises(SandboxUnavailable, match="could not start"):
        SubprocessSandbox(FAST, bwrap="/bin/false").run({"main.py": "print(1)"}, "main.py")


def test_refuses_without_an_interpreter_the_sandbox_can_read(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable, match="no interpreter"):
        SubprocessSandbox(FAST, python=str(tmp_path / "no-python")).run({"main.py": "print(1)"}, "main.py")


def test_memory_limit_covers_every_process_of_the_run() -> None:
    if os.geteuid() != 0 and SandboxCgroup.create(4, 1 << 28, 1.0) is None:
        pytest.skip("no writable memory cgroup for this user: the per-process address-space rlimit is the fallback")
    # Four children each stay under the per-process address-space rlimit; together they exceed
    # the cgroup's memory limit, which only a cgroup can see.
    code = (
        "import os\n"
        "kids = []\n"
        "for _ in range(4):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        block = bytearray(120 * 1024 * 1024)\n"
        "        block[::4096] = b'x' * len(block[::4096])\n"
        "        import time; time.sleep(3)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "print(sorted(os.waitpid(k, 0)[1] for k in kids))\n"
    )
    result = run(code, Limits(wall_seconds=20.0, memory_bytes=256 * 1024 * 1024, processes=16))
    statuses = eval(result.stdout) if result.stdout.strip() else None
    assert result.killed_by == "memory" or (statuses is not None and any(s != 0 for s in statuses)), result


def test_a_killed_gateways_cgroup_is_swept_later() -> None:
    if os.geteuid() != 0:
        pytest.skip("only root makes cgroups here")
    leftover = SandboxCgroup.create(4, 1 << 28, 1.0)  # a run whose gateway died before removing it
    assert leftover is not None
    old = time.time() - cgroup_module.STALE_AFTER_S - 1
    for d in leftover.dirs.values():
        os.utime(d, (old, old))
    fresh = SandboxCgroup.create(4, 1 << 28, 1.0)
    assert fresh is not None
    try:
        assert all(not d.exists() for d in leftover.dirs.values())
    finally:
        fresh.remove()


def test_cgroup_v2_limits_are_written_in_v2_terms(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # This host's v2 hierarchy offers no controllers (memory, pids and cpu are bound to v1), so the
    # kernel cannot enforce a v2 cgroup here: this checks what a v2 host would get, on a stand-in tree.
    root = tmp_path / "unified"
    (root / "gw").mkdir(parents=True)
    (root / "gw" / "cgroup.subtree_control").write_text("cpu memory pids\n")
    real_mkdir = cgroup_module._mkdir

    def kernel_like_mkdir(path: Path) -> bool:
        made = real_mkdir(path)
        if made:
            (path / "cgroup.controllers").write_text("cpu memory pids\n")  # what the kernel would add
        return made

    monkeypatch.setattr(cgroup_module, "_mounts", lambda: [(str(root), "cgroup2", {"rw"})])
    monkeypatch.setattr(cgroup_module, "_own_paths", lambda: {"": "/gw"})
    monkeypatch.setattr(cgroup_module, "_mkdir", kernel_like_mkdir)
    cgroup = SandboxCgroup.create(16, 256 * 1024 * 1024, 0.5)
    assert cgroup is not None and cgroup.controllers == {"pids", "memory", "cpu"}
    (d,) = set(cgroup.dirs.values())
    assert d.parent == root / "gw" and cgroup.procs_files == [d / "cgroup.procs"]
    assert (d / "pids.max").read_text() == "16" and (d / "memory.max").read_text() == str(256 * 1024 * 1024)
    assert (d / "memory.swap.max").read_text() == "0" and (d / "cpu.max").read_text() == "50000 100000"
    assert not (d / "memory.limit_in_bytes").exists()  # nothing in v1 terms
