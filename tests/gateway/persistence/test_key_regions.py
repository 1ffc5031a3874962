"""A database key's and team's allowed regions and data policy (SQLite and PostgreSQL): stored by
`gwctl` and the admin API, shown by both, and enforced by routing as routing.keys' are: the
team's list narrows the key's, a model with no allowed endpoint is the SDK's 400
no_endpoint_matches, and a model with one is routed only there."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.cli.gwctl import main
from gateway.persistence import keys, teams
from providers.http_mock import MockHTTPClient
from tests.gateway.persistence.app_helpers import ADMIN, settings
from tests.gateway.persistence.test_app import url_of
from tests.gateway.persistence.test_key_limits import PRICE, answer

HELLO = [{"role": "user", "content": "hi"}]


def regional(tmp_path: Path, engine: Engine) -> Any:
    """Model m in eu-west (p), us-east (q) and eu-north (r, which may keep prompts); us-only in us-east."""
    return settings(
        tmp_path,
        url_of(engine),
        providers=[
            {"name": "p", "base_url": "http://p.test/v1", "region": "eu-west"},
            {"name": "q", "base_url": "http://q.test/v1", "region": "us-east"},
            {"name": "r", "base_url": "http://r.test/v1", "region": "eu-north", "keeps_prompts": True},
        ],
        deployments=[
            {"model": "m", "provider": "p", "upstream_model": "up", "price": PRICE},
            {"model": "m", "provider": "q", "upstream_model": "up", "price": PRICE},
            {"model": "m", "provider": "r", "upstream_model": "up", "price": PRICE},
            {"model": "us-only", "provider": "q", "upstream_model": "up", "price": PRICE},
        ],
    )


def sdk(client: TestClient, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url="http://testserver/v1", api_key=secret, http_client=client, max_retries=0)


def endpoint(c: openai.OpenAI, model: str, only: str | None = None) -> str:
    """The endpoint that answered (`provider.only` pins one: routing is sticky otherwise)."""
    extra = {"provider": {"only": [only]}} if only else None
    raw = c.chat.completions.with_raw_response.create(model=model, messages=HELLO, max_tokens=5, extra_body=extra)
    return raw.headers["x-gateway-endpoint"]


def refusal(c: openai.OpenAI, model: str, only: str | None = None) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as refused:
        endpoint(c, model, only)
    return refused.value


def test_key_and_team_regions_and_data_policy_steer_routing(engine: Engine, tmp_path: Path) -> None:
    teams.create_team(engine, "eu", allowed_regions=["eu-*"])
    member = keys.create_key(engine, "member", team="eu", allowed_regions=["eu-west", "us-east"])
    roamer = keys.create_key(engine, "roamer", allowed_regions=["EU-*"])
    private = keys.create_key(engine, "private", data_collection="deny")
    free = keys.create_key(engine, "free")
    with TestClient(create_app(regional(tmp_path, engine), client_factory=lambda: MockHTTPClient(answer))) as client:
        # The team allows eu-*, the key eu-west and us-east: only eu-west is left.
        m = sdk(client, member)
        assert {endpoint(m, "m") for _ in range(4)} == {"p/m"}
        exc = refusal(m, "us-only")
        assert exc.status_code == 400 and exc.code == "no_endpoint_matches"
        assert "q/us-only: region" in exc.message and "not allowed for this key" in exc.message
        assert exc.body["type"] == "invalid_request_error"  # type: ignore[index]
        assert "q/m: region" in refusal(m, "m", "q").message and "r/m: region" in refusal(m, "m", "r").message
        # A pattern alone (matched without regard to case), and data collection denied alone.
        r = sdk(client, roamer)
        assert endpoint(r, "m", "r") == "r/m" and "q/m: region" in refusal(r, "m", "q").message
        p = sdk(client, private)
        assert endpoint(p, "m", "q") == "q/m" and "r/m: data_policy" in refusal(p, "m", "r").message
        f = sdk(client, free)
        assert [endpoint(f, "m", x) for x in "pqr"] == ["p/m", "q/m", "r/m"] and endpoint(f, "us-only") == "q/us-only"

        # The team's data policy binds its keys too, from the next refresh on.
        teams.update_team(engine, "eu", data_collection="deny", allowed_regions=None)
        keys.update_key(engine, "member", allowed_regions=None)
        deadline = time.monotonic() + 5
        while _answers(m, "q") is False:
            assert time.monotonic() < deadline, "the refresh did not bring the new policy"
            time.sleep(0.05)
        assert "r/m: data_policy" in refusal(m, "m", "r").message and endpoint(m, "us-only") == "q/us-only"


def _answers(c: openai.OpenAI, only: str) -> bool:
    try:
        endpoint(c, "m", only)
    except openai.BadRequestError:
        return False
    return True


def test_gwctl_and_the_admin_api_store_and_show_the_policy(
    engine: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gw.yaml"
    config.write_text(json.dumps({"database": {"url": url_of(engine)}}))
    c = ["-c", str(config)]
    assert main(["teams", "create", "eu", "--regions", "eu-*", "--data-collection", "deny", "--json", *c]) == 0
    team = json.loads(capsys.readouterr().out)
    assert team["allowed_regions"] == ["eu-*"] and team["data_collection"] == "deny"
    assert main(["keys", "create", "k", "--team", "eu", "--regions", "eu-west, us-east", *c]) == 0
    capsys.readouterr()
    assert main(["keys", "show", "k", "--json", *c]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["allowed_regions"] == ["eu-west", "us-east"] and row["data_collection"] == "allow"
    assert main(["keys", "update", "k", "--regions", "none", "--data-collection", "deny", "--json", *c]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["allowed_regions"] is None and row["data_collection"] == "deny"
    assert main(["keys", "list", "--json", *c]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["data_collection"] == "deny"
    with pytest.raises(SystemExit):  # argparse refuses anything but allow|deny
        main(["keys", "update", "k", "--data-collection", "maybe", *c])
    capsys.readouterr()

    with TestClient(create_app(regional(tmp_path, engine), client_factory=lambda: MockHTTPClient(answer))) as client:
        made = client.post(
            "/admin/api/keys",
            json={"name": "api", "allowed_regions": ["us-*"], "data_collection": "deny"},
            headers=ADMIN,
        )
        assert made.status_code == 201, made.text
        assert made.json()["allowed_regions"] == ["us-*"] and made.json()["data_collection"] == "deny"
        bad = client.patch("/admin/api/keys/api", json={"data_collection": "sometimes"}, headers=ADMIN)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "data_collection"
        patched = client.patch(
            "/admin/api/teams/eu", json={"allowed_regions": None, "data_collection": "allow"}, headers=ADMIN
        )
        assert patched.status_code == 200 and patched.json()["allowed_regions"] is None
        assert patched.json()["data_collection"] == "allow"
        listed_teams = client.get("/admin/api/teams", headers=ADMIN).json()["data"]
        assert [t["data_collection"] for t in listed_teams] == ["allow"]
