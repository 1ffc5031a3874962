"""The real sandbox: runs code, and contains what it must (network, runaway CPU, memory, processes,
file size, output, environment, writes outside its scratch dir); refuses to run without isolation."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from probes.agent import sandbox as sandbox_module
from probes.agent.cgroup import PidsCgroup
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


def test_isolated_mode_and_stripped_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_SANDBOX_SECRET", "do-not-leak")
    result = run("import os, sys\nprint(sys.flags.isolated, sys.flags.no_site, sorted(os.environ))")
    assert result.stdout.strip() == "1 1 ['HOME', 'LANG', 'PATH', 'TMPDIR']"


def test_scratch_dir_holds_the_files_and_is_removed() -> None:
    result = SubprocessSandbox(FAST).run(
        {"main.py": "import os, sys\nsys.path.insert(0, '.')  # -I leaves the script's dir out\nimport helper\nprint(os.getcwd(), helper.X)\nopen('out.txt', 'w').write('ok')", "helper.py": "X = 7"},
        "main.py", args=(),
    )
    assert result.ok, result.stderr
    scratch, x = result.stdout.split()
    assert x == "7" and Path(scratch).name.startswith("agent-sandbox-") and not Path(scratch).exists()


def test_scratch_dir_is_removed_after_a_timeout() -> None:
    result = run("import os, time\nprint(os.getcwd(), flush=True)\nwhile True: time.sleep(0.1)", Limits(wall_seconds=1.5))
    assert result.timed_out and result.killed_by == "timeout" and result.exit_code is None
    assert result.stdout.strip() and not Path(result.stdout.strip()).exists()


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
    assert result.exit_code == 1 and "Read-only file system" in result.stderr
    assert not target.exists()


def test_cgroup_is_removed_after_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[PidsCgroup] = []
    real_create = PidsCgroup.create

    def spy(max_pids: int) -> PidsCgroup | None:
        made.append(real_create(max_pids))  # type: ignore[arg-type]
        return made[-1]

    monkeypatch.setattr(PidsCgroup, "create", staticmethod(spy))
    assert run("print(1)").ok
    assert made and made[0] is not None and not made[0].path.exists()


def test_refuses_without_a_way_to_isolate_the_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sandbox_module.shutil, "which", lambda name: None)
    monkeypatch.delattr(os, "unshare", raising=False)
    target = tmp_path / "ran"
    with pytest.raises(SandboxUnavailable, match="refusing"):
        run(f"open({str(target)!r}, 'w')")
    assert not target.exists()


def test_refuses_when_isolation_did_not_take(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # No namespace tool in front of the boot process: it must notice and refuse to run the code.
    monkeypatch.setattr(SubprocessSandbox, "_launcher", lambda self: ([], False))
    marker = tmp_path / "ran"
    with pytest.raises(SandboxUnavailable, match="parent.s net namespace"):
        run(f"open({str(marker)!r}, 'w')")
    assert not marker.exists()


def test_refuses_as_root_without_a_pids_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PidsCgroup, "create", staticmethod(lambda max_pids: None))
    monkeypatch.setattr(sandbox_module.os, "geteuid", lambda: 0)
    with pytest.raises(SandboxUnavailable, match="pids cgroup"):
        run("print(1)")


def test_hidden_directories_read_as_empty(tmp_path: Path) -> None:
    secrets = tmp_path / "gateway-home"
    secrets.mkdir()
    (secrets / "config.yaml").write_text("admin_key: sk-secret")
    code = (
        "import os, sys\n"
        f"print(sorted(os.listdir({str(secrets)!r})))\n"
        f"try:\n    open({str(secrets / 'config.yaml')!r}).read()\nexcept OSError as e:\n    print(type(e).__name__)\n"
    )
    result = SubprocessSandbox(FAST, hide=[str(secrets)]).run({"main.py": code}, "main.py")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["[]", "FileNotFoundError"]


def test_by_default_the_working_directory_is_hidden_but_the_interpreter_kept() -> None:
    cwd = str(Path.cwd().resolve())  # the repository (configs, databases) while tests run
    assert cwd in sandbox_module.default_hidden(sandbox_module.sys.executable)
    result = run(f"import os\nprint(os.listdir({cwd!r}))")
    assert (result.exit_code, result.stdout) == (0, "[]\n"), result.stderr
