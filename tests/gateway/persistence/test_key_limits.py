"""Keys and teams in the database (SQLite and PostgreSQL) with their limits: the repository,
spend per budget period from the recorded spend, and the running gateway enforcing them: a
team's budget binds all its keys, an expired or revoked key gets 401, and a restarted gateway
(its counters gone) still knows what was spent, from the database's record."""

from __future__ import annotations

import json
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import Engine, func, insert, select
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.cli.gwctl import main
from gateway.persistence import keys, teams
from gateway.persistence.key_views import views
from gateway.persistence.models import spend_daily
from gateway.state import AppState
from providers.base import UpstreamRequest
from providers.http_mock import MockHTTPClient, MockResponse
from tests.gateway.persistence.app_helpers import settings
from tests.gateway.persistence.test_app import url_of, wait_for

PRICE = {"input": 0.0, "output": 100.0}  # 100 output tokens: $0.01
HELLO = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}


def answer(request: UpstreamRequest) -> MockResponse:
    body = orjson.loads(request.body)
    reply = {
        "id": "x",
        "object": "chat.completion",
        "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 100, "total_tokens": 110},
    }
    return MockResponse(200, {"content-type": "application/json"}, orjson.dumps(reply))


def spend(engine: Engine, name: str, day: date, cost: float) -> None:
    with engine.begin() as conn:
        conn.execute(
            insert(spend_daily),
            {"key_name": name, "day": day, "requests": 1, "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0, "cost_usd": cost},
        )


def test_teams_keys_update_rotate_and_spend_per_period(engine: Engine) -> None:
    teams.create_team(engine, "eng", budget_usd=10.0, budget_period="monthly", rpm_limit=100)
    secret = keys.create_key(engine, "a", team="eng", budget_usd=2.0, budget_period="daily", allowed_models=["m*"])
    keys.create_key(engine, "b", team="eng", max_parallel=3, metadata={"owner": "ci"})
    with pytest.raises(keys.TeamNotFound):
        keys.create_key(engine, "c", team="nope")
    today = datetime.now(UTC).date()
    spend(engine, "a", today, 0.5)
    spend(engine, "a", today - timedelta(days=40), 7.0)  # an earlier month: only in `total`
    spend(engine, "b", today, 1.25)

    rows, team_rows = views(engine, time.time())
    a = next(r for r in rows if r["name"] == "a")
    assert a["team"] == "eng" and a["budget_period"] == "daily" and a["allowed_models"] == ["m*"]
    assert a["spend_usd"] == 0.5 and a["remaining_usd"] == 1.5 and a["budget_resets_at"] is not None
    assert a["team_budget"]["spend_usd"] == 1.75 and a["team_budget"]["remaining_usd"] == 8.25
    (eng,) = team_rows
    assert eng["keys"] == ["a", "b"] and eng["rpm"] == 100

    keys.update_key(engine, "a", budget_period="total", team=None)
    a = next(r for r in views(engine, time.time())[0] if r["name"] == "a")
    assert a["team"] is None and a["spend_usd"] == 7.5 and a["remaining_usd"] == 0.0

    new = keys.rotate_key(engine, "a")
    loaded = keys.load_keys(engine)
    assert new != secret and "a" in loaded.active.values()
    assert keys.key_digest(new) in loaded.active and keys.key_digest(secret) not in loaded.active

    with pytest.raises(teams.TeamInUse):
        teams.delete_team(engine, "eng")  # b is still in it
    keys.update_key(engine, "b", team=None)
    teams.delete_team(engine, "eng")
    assert teams.list_teams(engine) == []


def test_team_budget_expiry_revocation_and_restart(engine: Engine, tmp_path: Path) -> None:
    teams.create_team(engine, "t", budget_usd=0.03, budget_period="total")
    a = keys.create_key(engine, "a", team="t")
    b = keys.create_key(engine, "b", team="t", budget_usd=100.0)
    old = keys.create_key(engine, "old", expires_at=datetime(2020, 1, 1, tzinfo=UTC))
    cfg = settings(
        tmp_path,
        url_of(engine),
        persistence={"writer": "thread"},
        deployments=[{"model": "m", "provider": "p", "upstream_model": "up", "price": PRICE}],
    )

    def post(client: TestClient, secret: str) -> Any:
        return client.post("/v1/chat/completions", json=HELLO, headers={"authorization": f"Bearer {secret}"})

    with TestClient(create_app(cfg, client_factory=lambda: MockHTTPClient(answer))) as client:
        state: AppState = client.app_state["gw"]
        assert post(client, a).status_code == 200
        assert post(client, a).status_code == 200
        assert post(client, b).status_code == 200  # $0.03: the team's budget is spent
        refused = post(client, b)
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert error["code"] == "insufficient_quota" and "team t" in error["message"]
        assert post(client, a).json()["error"]["code"] == "insufficient_quota"
        expired = post(client, old)
        assert expired.status_code == 401 and expired.json()["error"]["code"] == "expired_api_key"
        keys.revoke_key(engine, "a")
        wait_for(lambda: post(client, a).status_code == 401)
        assert state.persistence is not None
        wait_for(lambda: state.persistence is not None and state.persistence.stats.written >= 5)

    with engine.connect() as conn:
        recorded = conn.execute(select(func.sum(spend_daily.c.cost_usd))).scalar_one()
    assert recorded == pytest.approx(0.03)

    # A restarted gateway has empty counters: the team's recorded spend still binds it.
    with TestClient(create_app(cfg, client_factory=lambda: MockHTTPClient(answer))) as client:
        again = post(client, b)
        assert again.status_code == 429 and again.json()["error"]["code"] == "insufficient_quota"

    _, (t,) = views(engine, time.time())
    assert t["spend_usd"] == pytest.approx(0.03) and t["remaining_usd"] == 0.0


def test_gwctl_keys_and_teams(engine: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gw.yaml"
    config.write_text(json.dumps({"database": {"url": url_of(engine)}}))
    c = ["-c", str(config)]
    assert main(["teams", "create", "eng", "--budget", "5", "--period", "weekly", "--rpm", "50", *c]) == 0
    capsys.readouterr()
    assert main(["keys", "create", "k", "--team", "eng", "--budget", "1", "--models", "gpt-*,m", "--max-parallel", "2", *c]) == 0
    secret = capsys.readouterr().out.strip()
    assert secret.startswith("sk-gw-")
    spend(engine, "k", datetime.now(UTC).date(), 0.25)

    assert main(["keys", "show", "k", "--json", *c]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["spend_usd"] == 0.25 and row["remaining_usd"] == 0.75 and row["max_parallel"] == 2
    assert row["allowed_models"] == ["gpt-*", "m"] and row["team_budget"]["remaining_usd"] == 4.75

    assert main(["keys", "update", "k", "--budget", "none", "--rpm", "7", "--json", *c]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["budget_usd"] is None and row["remaining_usd"] is None and row["rpm_limit"] == 7

    assert main(["keys", "rotate", "k", *c]) == 0
    rotated = capsys.readouterr().out.strip()
    assert rotated.startswith("sk-gw-") and rotated != secret

    assert main(["keys", "list", *c]) == 0
    listing = capsys.readouterr().out
    assert "eng" in listing and "$0.25" in listing and secret not in listing and rotated not in listing

    assert main(["teams", "list", "--json", *c]) == 0
    (team,) = json.loads(capsys.readouterr().out)
    assert team["name"] == "eng" and team["keys"] == ["k"] and team["spend_usd"] == 0.25

    assert main(["teams", "delete", "eng", *c]) == 2
    assert "still has 1 key" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse refuses an unknown period
        main(["keys", "update", "k", "--period", "fortnightly", *c])
    capsys.readouterr()
    assert main(["keys", "update", "k", "--rpm", "0", *c]) == 2
    assert "at least 1" in capsys.readouterr().err
    assert main(["keys", "revoke", "k", *c]) == 0
    capsys.readouterr()
    assert main(["keys", "show", "k", "--json", *c]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "revoked"
