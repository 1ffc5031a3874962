"""The admin API for keys and teams (SQLite and PostgreSQL): create, show, update, rotate, revoke,
with spend and remaining budget, live from the limiter while it holds a counter."""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import Engine
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.state import AppState
from providers.http_mock import MockHTTPClient
from tests.gateway.persistence.app_helpers import ADMIN, settings
from tests.gateway.persistence.test_app import url_of, wait_for
from tests.gateway.persistence.test_key_limits import HELLO, PRICE, answer


def test_keys_and_teams_over_the_admin_api(engine: Engine, tmp_path: Path) -> None:
    cfg = settings(
        tmp_path,
        url_of(engine),
        persistence={"writer": "thread"},
        deployments=[{"model": "m", "provider": "p", "upstream_model": "up", "price": PRICE}],
    )
    with TestClient(create_app(cfg, client_factory=lambda: MockHTTPClient(answer))) as client:
        team = client.post("/admin/api/teams", json={"name": "eng", "budget_usd": 1.0, "budget_period": "daily"}, headers=ADMIN)
        assert team.status_code == 201, team.text
        assert team.json()["remaining_usd"] == 1.0
        assert client.post("/admin/api/teams", json={"name": "eng"}, headers=ADMIN).status_code == 409

        made = client.post(
            "/admin/api/keys",
            json={"name": "k", "team": "eng", "budget_usd": 0.5, "budget_period": "total", "allowed_models": ["m"]},
            headers=ADMIN,
        )
        assert made.status_code == 201, made.text
        secret = made.json()["key"]
        assert secret.startswith("sk-gw-") and made.json()["team"] == "eng"
        missing_team = client.post("/admin/api/keys", json={"name": "x", "team": "nope"}, headers=ADMIN)
        assert missing_team.status_code == 404 and missing_team.json()["error"]["code"] == "team_not_found"
        bad = client.post("/admin/api/keys", json={"name": "y", "rpm": 0}, headers=ADMIN)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "rpm"

        user = {"authorization": f"Bearer {secret}"}
        wait_for(lambda: client.post("/v1/chat/completions", json=HELLO, headers=user).status_code == 200)
        state: AppState = client.app_state["gw"]
        assert state.limits is not None
        deadline = time.monotonic() + 5
        while True:  # the settlement follows the answer
            row = client.get("/admin/api/keys/k", headers=ADMIN).json()
            if row["spend_usd"] == 0.01 or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert row["spend_source"] == "live" and row["spend_usd"] == 0.01 and row["remaining_usd"] == 0.49
        assert row["team_budget"]["budget_usd"] == 1.0

        patched = client.patch("/admin/api/keys/k", json={"rpm": 5, "budget_usd": None}, headers=ADMIN)
        assert patched.status_code == 200 and patched.json()["rpm_limit"] == 5 and patched.json()["budget_usd"] is None
        assert client.patch("/admin/api/keys/nobody", json={"rpm": 5}, headers=ADMIN).status_code == 404

        rotated = client.post("/admin/api/keys/k/rotate", headers=ADMIN).json()["key"]
        assert rotated != secret
        wait_for(lambda: client.post("/v1/chat/completions", json=HELLO, headers=user).status_code == 401)
        rotated_user = {"authorization": f"Bearer {rotated}"}
        assert client.post("/v1/chat/completions", json=HELLO, headers=rotated_user).status_code == 200

        assert client.delete("/admin/api/teams/eng", headers=ADMIN).status_code == 409  # k is in it
        revoked = client.post("/admin/api/keys/k/revoke", headers=ADMIN)
        assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
        wait_for(lambda: client.post("/v1/chat/completions", json=HELLO, headers=rotated_user).status_code == 401)
        listing = client.get("/admin/api/keys", headers=ADMIN).json()["data"]
        assert [r["name"] for r in listing] == ["k"] and "key" not in listing[0]
        teams = client.get("/admin/api/teams", headers=ADMIN).json()["data"]
        assert teams[0]["keys"] == ["k"]


def test_team_spend_over_the_admin_api(engine: Engine, tmp_path: Path) -> None:
    cfg = settings(
        tmp_path,
        url_of(engine),
        persistence={"writer": "thread"},
        deployments=[{"model": "m", "provider": "p", "upstream_model": "up", "price": PRICE}],
    )
    with TestClient(create_app(cfg, client_factory=lambda: MockHTTPClient(answer))) as client:
        assert client.post("/admin/api/teams", json={"name": "eng"}, headers=ADMIN).status_code == 201
        secret = client.post("/admin/api/keys", json={"name": "k", "team": "eng"}, headers=ADMIN).json()["key"]
        user = {"authorization": f"Bearer {secret}"}
        wait_for(lambda: client.post("/v1/chat/completions", json=HELLO, headers=user).status_code == 200)

        def eng() -> list[dict[str, object]]:
            return client.get("/admin/api/spend/teams?days=7", headers=ADMIN).json()["data"]

        wait_for(lambda: bool(eng()))  # the request writer records the spend off the request path
        (row,) = eng()
        assert row["team"] == "eng" and row["keys"] == ["k"] and row["requests"] == 1 and row["cost_usd"] == 0.01
        assert len(row["days"]) == 1 and row["days"][0]["cost_usd"] == 0.01  # type: ignore[index]
        bad = client.get("/admin/api/spend/teams?days=0", headers=ADMIN)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "days"
        assert client.get("/admin/api/spend/teams").status_code == 401
