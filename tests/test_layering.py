"""Dependencies run one way: the contracts in pyproject.toml ([tool.importlinter]) hold, and an
upward import or an import cycle breaks them (checked on a copy of the packages with one added)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kernel", "providers", "gateway", "probes")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter over the packages under `root`, with the contract in pyproject.toml."""
    code = (
        "import sys\nfrom importlinter.cli import lint_imports\n"
        "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))"
    )
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def copy_packages(dest: Path) -> None:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.gguf"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")


def test_every_import_points_down_the_layers() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "upward"),
    [
        ("kernel/errors.py", "gateway.config"),  # the bottom imports nothing of ours
        ("providers/http.py", "gateway.catalog"),  # providers know nothing of the gateway
        ("gateway/state_store/memory.py", "gateway.routing.settings"),
        ("gateway/persistence/records.py", "gateway.http.errors"),
        ("probes/runner.py", "gateway.pipeline.context"),  # probes sit beside the pipeline, not above it
        ("gateway/translate/anthropic_request.py", "gateway.pipeline.context"),  # pure translation, below the stages
        ("gateway/limits/stage.py", "gateway.persistence.keys"),  # limits sit below persistence
        ("gateway/pipeline/dispatch.py", "gateway.limits.stage"),  # and above the pipeline's stages
        ("gateway/http/route_admin.py", "gateway.cli.route"),
    ],
)
def test_an_upward_import_breaks_the_contract(tmp_path: Path, module: str, upward: str) -> None:
    copy_packages(tmp_path)
    with (tmp_path / module).open("a") as f:
        f.write(f"\nimport {upward}  # an upward import\n")
    result = lint_imports(tmp_path)
    importer = module.removesuffix(".py").replace("/", ".")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"- {importer} -> {upward}" in result.stdout, result.stdout


def test_a_cycle_hidden_in_a_function_breaks_the_contract(tmp_path: Path) -> None:
    copy_packages(tmp_path)
    with (tmp_path / "gateway/pipeline/fanout.py").open("a") as f:
        f.write("\n\ndef _late():\n    from gateway.pipeline.dispatch import Dispatcher\n\n    return Dispatcher\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "No cycles are allowed in gateway.pipeline" in result.stdout, result.stdout
    assert "- .fanout -> .dispatch" in result.stdout or "- .dispatch -> .fanout" in result.stdout, result.stdout
