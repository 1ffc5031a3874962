"""scripts/admin_key.sh, which scripts/serve.sh runs: a first start makes the dashboard's admin key
(0600), later starts reuse it, a configured key wins, and one line says how to sign in."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def run(config: Path, state: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GW_")} | {"GW_STATE_DIR": str(state)} | env
    return subprocess.run(
        ["bash", str(REPO / "scripts/admin_key.sh"), str(config)], env=environ, capture_output=True, text=True, timeout=60, check=True
    )


def test_a_first_start_makes_a_private_key_and_says_how_to_sign_in(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"server": {"host": "127.0.0.1", "port": 9123}}))
    state = tmp_path / "state"

    first = run(config, state)
    key_file = state / "admin_key"
    key = first.stdout.strip()
    assert key.startswith("sk-admin-") and len(key) > 40 and key_file.read_text().strip() == key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    (line,) = first.stderr.splitlines()
    assert "http://127.0.0.1:9123/admin" in line and str(key_file) in line and key not in line

    again = run(config, state)
    assert again.stdout.strip() == key  # the same key on every later start


def test_a_configured_admin_key_is_left_alone(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"auth": {"admin_key": "sk-mine-000000000000"}}))
    state = tmp_path / "state"
    done = run(config, state)
    assert done.stdout == "" and not (state / "admin_key").exists()
    assert "configured admin key" in done.stderr
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump({"server": {"port": 9124}}))
    from_env = run(plain, state, GW_AUTH__ADMIN_KEY="sk-env-0000000000000")
    assert from_env.stdout == "" and not (state / "admin_key").exists()
