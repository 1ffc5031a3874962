"""Serving needs no llama-cpp-python: scripts/install.sh installs it only with the `testbed` extra
(it compiles for minutes), nothing the gateway imports needs it, and the testbed says what to
install when it is missing. The engine's source comes from the sdist that extra pins."""

from __future__ import annotations

import os
import pkgutil
import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Makes `import llama_cpp` fail and find_spec("llama_cpp") answer None, as on a plain install.
BLOCK = "import sys; sys.modules['llama_cpp'] = None\n"


def python(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", BLOCK + code], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_no_dependency_of_a_plain_install_is_llama_cpp_python() -> None:
    assert not [d for d in project()["dependencies"] if d.replace("_", "-").startswith("llama-cpp-python")]


def test_the_testbed_extra_pins_one_version_and_test_includes_it() -> None:
    extras = project()["optional-dependencies"]
    assert [d for d in extras["testbed"] if d.startswith("llama-cpp-python")] == ["llama-cpp-python==0.3.36"]
    assert "llm-gateway[testbed]" in extras["test"]


def test_every_module_of_the_gateway_imports_without_llama_cpp() -> None:
    names = [
        m.name
        for pkg in ("gateway", "providers", "probes")
        for m in pkgutil.walk_packages([str(REPO / pkg)], prefix=f"{pkg}.")
        if not m.name.endswith("__main__")
    ]
    assert "gateway.cli.gwctl" in names and "probes.testbed.server" in names and len(names) > 100
    code = (
        "import importlib, traceback\n"
        f"for name in {names!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError as exc:\n"
        "        print(name, exc)\n"
        "print('llama_cpp loaded:', sys.modules['llama_cpp'] is not None)\n"
    )
    result = python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "llama_cpp loaded: False"


def test_gwctl_testbed_without_llama_cpp_says_what_to_install() -> None:
    result = python("from gateway.cli.gwctl import main; sys.exit(main(['testbed', '-c', 'deploy/testbed.yaml']))")
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("gwctl: the testbed needs llama-cpp-python") and "GW_EXTRAS=testbed" in line


def test_the_testbed_server_process_without_llama_cpp_exits_with_one_line() -> None:
    # What the harness shows in its TestbedError when the child's interpreter lacks it.
    result = python("from probes.testbed.server import main; sys.exit(main(['--endpoints', '[]']))")
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("testbed: the testbed needs llama-cpp-python")


def test_the_engine_is_built_from_the_pinned_sdist() -> None:
    out = subprocess.run(
        ["bash", str(REPO / "scripts/build_llama_server.sh"), "--print-config"],
        env={k: v for k, v in os.environ.items() if k != "LLAMA_CPP_PYTHON_VERSION"},
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    (pin,) = [d for d in project()["optional-dependencies"]["testbed"] if d.startswith("llama-cpp-python")]
    assert re.search(r"^version=(.+)$", out, re.MULTILINE).group(1) == pin.split("==")[1]


def test_install_sh_adds_no_extra_unless_asked() -> None:
    # The pip target install.sh computes, from its own line (run with and without GW_EXTRAS).
    script = (REPO / "scripts/install.sh").read_text()
    (line,) = [s for s in script.splitlines() if s.startswith("target=")]
    for extras, expected in (("", "."), ("test", ".[test]"), ("testbed", ".[testbed]")):
        env = {"PATH": os.environ["PATH"], **({"GW_EXTRAS": extras} if extras else {})}
        got = subprocess.run(["bash", "-c", f'{line}; printf %s "$target"'], env=env, capture_output=True, text=True, check=True)
        assert got.stdout == expected
