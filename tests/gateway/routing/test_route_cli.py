"""`gwctl route explain`: a dry run over the configured catalog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.cli.gwctl import main

CONFIG = """
auth:
  keys: [{name: eu-team, key: sk-eu-team-0001}]
routing:
  keys:
    eu-team: {regions: [eu]}
providers:
  - {name: together, kind: together, base_url: "https://api.together.xyz/v1", api_key_env: TOGETHER_KEY_FOR_TEST, region: us}
  - {name: eu-cloud, kind: openai, base_url: "https://eu.example/v1", region: eu, keeps_prompts: true}
deployments:
  - {model: llama, provider: together, price: {input: 0.2, output: 0.2}, context_window: 131072}
  - {model: llama, provider: eu-cloud, price: {input: 0.1, output: 0.1}, context_window: 131072, capabilities: {tools: false}}
engines:
  - {name: local, kind: llamacpp, served_model_name: llama, replicas: 2, n_ctx: 4096}
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG)
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"messages": [{"role": "user", "content": "Summarise the incident report."}]}))
    return config, request


def test_table_lists_every_candidate_and_the_pick(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, request = files
    assert main(["route", "explain", "-c", str(config), "--model", "llama", "--file", str(request)]) == 0
    out = capsys.readouterr().out
    for endpoint in ("together/llama", "eu-cloud/llama", "local-0", "local-1"):
        assert endpoint in out
    assert "pick: " in out and "prompt" in out and "(estimated)" in out
    assert "ttft" in out.splitlines()[1] and "cost" in out.splitlines()[1]


def test_filtered_candidates_show_their_reason(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, request = files
    body = {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}], "provider": {"data_collection": "deny"}}
    request.write_text(json.dumps(body))
    assert main(["route", "explain", "-c", str(config), "-m", "llama", "-f", str(request), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {f["endpoint"]: f["reason"] for f in doc["filtered"]} == {"eu-cloud/llama": "tools"}
    assert doc["pick"] in ("together/llama", "local-0", "local-1")
    assert doc["header"].startswith(doc["pick"])
    assert len(doc["ranked"]) == 3 and all("ttft" in r["terms"] for r in doc["ranked"])


def test_the_key_policy_applies(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, request = files
    assert main(["route", "explain", "-c", str(config), "-m", "llama", "-f", str(request), "--key", "eu-team", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pick"] == "eu-cloud/llama"
    assert {f["endpoint"]: f["reason"] for f in doc["filtered"]} == {"together/llama": "region", "local-0": "region", "local-1": "region"}


def test_a_config_key_and_team_policy_applies(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """auth.keys' allowed_regions and its team's data policy (limits.teams) filter as routing.keys' do."""
    config, request = files

    def explain(keys: str, key: str) -> dict[str, Any]:
        old = "keys: [{name: eu-team, key: sk-eu-team-0001}]"
        config.write_text(CONFIG.replace(old, keys) + "limits: {teams: {private: {data_collection: deny}}}\n")
        args = ["route", "explain", "-c", str(config), "-m", "llama", "-f", str(request), "--key", key, "--json"]
        assert main(args) == 0
        doc: dict[str, Any] = json.loads(capsys.readouterr().out)
        return doc

    doc = explain("keys: [{name: member, key: sk-member-0001, team: private, allowed_regions: [u*]}]", "member")
    assert doc["pick"] == "together/llama"
    reasons = {f["endpoint"]: f["reason"] for f in doc["filtered"]}
    assert reasons == {"eu-cloud/llama": "region", "local-0": "region", "local-1": "region"}
    request.write_text(json.dumps({"messages": [{"role": "user", "content": "x"}], "provider": {"only": ["eu-cloud"]}}))
    doc = explain("keys: [{name: m2, key: sk-member-0002, team: private}]", "m2")
    assert doc["pick"] is None
    assert {f["endpoint"]: f["reason"] for f in doc["filtered"]}["eu-cloud/llama"] == "data_policy"


def test_a_request_nothing_can_serve(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, request = files
    request.write_text(json.dumps({"messages": [{"role": "user", "content": "x"}], "provider": {"region": "asia"}}))
    assert main(["route", "explain", "-c", str(config), "-m", "llama", "-f", str(request)]) == 0
    out = capsys.readouterr().out
    assert "pick: none" in out and "would answer 400" in out and "filtered: region" in out


def test_usage_errors(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, request = files
    assert main(["route", "explain", "-c", str(config), "-f", str(request)]) == 2
    assert "no model" in capsys.readouterr().err
    assert main(["route", "explain", "-c", str(config), "-m", "nope", "-f", str(request)]) == 1
    assert "would answer 404" in capsys.readouterr().err
    request.write_text('{"messages": "not a list"}')
    assert main(["route", "explain", "-c", str(config), "-m", "llama", "-f", str(request)]) == 1
    assert "would answer 400" in capsys.readouterr().err
    assert main(["route", "explain", "-c", str(config), "-m", "llama", "-f", str(config.parent / "missing.json")]) == 2


def test_live_explain_against_a_running_gateway(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.app import create_app
    from gateway.config import load_config
    from tests.fakes.servers import BackgroundLoop, GatewayServer

    _, request = files
    settings = load_config(
        environ={},
        auth={"admin_key": "sk-live-admin-01"},
        providers=[{"name": "a", "base_url": "http://127.0.0.1:9/v1"}, {"name": "b", "base_url": "http://127.0.0.1:9/v1", "region": "eu"}],
        deployments=[{"model": "m", "provider": "a"}, {"model": "m", "provider": "b"}],
    )
    loop = BackgroundLoop().start()
    server = GatewayServer(create_app(settings), loop).start()
    try:
        monkeypatch.setenv("GW_URL", server.root)
        monkeypatch.setenv("GW_ADMIN_KEY", "sk-live-admin-01")
        request.write_text(json.dumps({"messages": [{"role": "user", "content": "x"}], "provider": {"region": "eu"}}))
        assert main(["route", "explain", "--live", "-m", "m", "-f", str(request)]) == 0
        out = capsys.readouterr().out
        assert "pick: b/m" in out and "filtered: region" in out
        monkeypatch.setenv("GW_ADMIN_KEY", "sk-wrong-admin-1")
        assert main(["route", "explain", "--live", "-m", "m", "-f", str(request)]) == 2
        assert "401" in capsys.readouterr().err
    finally:
        server.stop()
        loop.stop()
