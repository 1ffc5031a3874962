"""The shipped deployment files never serve an open API on a reachable address: the Docker image
(0.0.0.0 with local.yaml) refuses to start without a key and says how to add one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gateway.cli.gwctl import main
from gateway.config import load_config
from gateway.pipeline.auth import open_bind_problem, open_by_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _dockerfile_env() -> dict[str, str]:
    text = (DEPLOY / "Dockerfile").read_text()
    return dict(re.findall(r"^ENV (\w+)=(\S+)$", text, re.MULTILINE))


def _dockerfile_config() -> Path:
    text = (DEPLOY / "Dockerfile").read_text()
    cmd = yaml.safe_load(re.search(r"^CMD (.+)$", text, re.MULTILINE).group(1))  # type: ignore[union-attr]
    return DEPLOY.parent / cmd[cmd.index("--config") + 1]


def test_the_image_with_its_default_config_is_not_open_on_0000() -> None:
    env = _dockerfile_env()
    assert env["GW_SERVER__HOST"] == "0.0.0.0"
    settings = load_config(_dockerfile_config(), environ=env)
    problem = open_bind_problem(settings)
    assert problem is not None and "GW_AUTH__OPEN=false" in problem and "GW_AUTH__KEYS" in problem


def test_gwctl_serve_refuses_to_start_open_on_a_reachable_address(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GW_SERVER__HOST", "0.0.0.0")
    assert main(["serve", "--config", str(_dockerfile_config())]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a loopback address" in err and "gwctl keys create" in err
    monkeypatch.delenv("GW_SERVER__HOST")
    assert main(["serve", "--config", str(DEPLOY / "config" / "local.yaml"), "--host", "10.0.0.5"]) == 2


def test_the_image_with_a_key_from_the_environment_is_fine() -> None:
    env = {
        **_dockerfile_env(),
        "GW_AUTH__OPEN": "false",
        "GW_AUTH__KEYS": '[{"name": "me", "key": "sk-0123456789abcdef"}]',
    }
    settings = load_config(_dockerfile_config(), environ=env)
    assert not open_by_config(settings) and open_bind_problem(settings) is None
    assert [k.name for k in settings.auth.keys] == ["me"]


def test_local_yaml_is_open_on_loopback_only() -> None:
    settings = load_config(DEPLOY / "config" / "local.yaml", environ={})
    assert settings.server.host == "127.0.0.1" and open_by_config(settings)
    assert open_bind_problem(settings) is None


def test_the_compose_and_k8s_configs_carry_keys() -> None:
    env = {"TOGETHER_API_KEY": "x", "DEEPINFRA_API_KEY": "y", "GW_SERVER__HOST": "0.0.0.0"}
    example = load_config(DEPLOY / "config" / "example.yaml", environ=env)
    assert example.auth.keys and open_bind_problem(example) is None
    docs = yaml.safe_load_all((DEPLOY / "k8s" / "gateway.yaml").read_text())
    manifest = next(d for d in docs if d["kind"] == "Deployment")
    env_names = {e["name"] for e in manifest["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert {"GW_AUTH__ADMIN_KEY", "GW_AUTH__KEYS"} <= env_names


def test_compose_stops_a_replica_within_its_drain_and_shutdown_budget() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    gateway = compose["services"]["gateway"]
    env = {k: str(v) for k, v in gateway["environment"].items() if "${" not in str(v)}
    settings = load_config(DEPLOY / "config" / "example.yaml", environ={**env, "TOGETHER_API_KEY": "x", "DEEPINFRA_API_KEY": "y"})
    grace = float(gateway["stop_grace_period"].removesuffix("s"))
    assert settings.server.drain_delay_s >= 5  # longer than deploy/nginx.conf's pooled-connection idle time
    assert grace >= settings.server.drain_delay_s + settings.server.shutdown_timeout_s + 5
    nginx = (DEPLOY / "nginx.conf").read_text()
    (idle,) = re.findall(r"keepalive_timeout (\d+)s;", nginx)
    assert float(idle) < settings.server.drain_delay_s
