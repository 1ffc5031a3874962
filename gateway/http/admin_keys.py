"""Admin API for keys and teams: the same as `gwctl keys|teams`, with each one's spend in the
current budget period and what is left of it. Spend is the limiter's live counter where one
exists (it includes requests in flight at their worst case), else the database's record.

Handlers are thin: validate the body, run one repository call off the event loop, serialise.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.http.admin_handlers import _handler, _int, _json, _persistence, _query
from gateway.limits.policy import period_bounds
from gateway.persistence import keys as key_repo
from gateway.persistence import stats
from gateway.persistence import teams as team_repo
from gateway.persistence.key_views import views
from gateway.state import AppState
from gateway.state_store.base import StoreUnavailable
from kernel.errors import InvalidRequest, NotFound


class _Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rpm: int | None = Field(None, ge=1)
    tpm: int | None = Field(None, ge=1)
    max_parallel: int | None = Field(None, ge=1)
    budget_usd: float | None = Field(None, ge=0)
    budget_period: Literal["daily", "weekly", "monthly", "total"] | None = None
    allowed_models: list[str] | None = None
    # Endpoint region names or fnmatch patterns; a team's narrow its keys'.
    allowed_regions: list[str] | None = None
    data_collection: Literal["allow", "deny"] | None = None
    expires_at: datetime | None = None
    metadata: dict[str, Any] | None = None

    def columns(self) -> dict[str, Any]:
        """The fields the body set (null clears one), as database columns."""
        rename = {"rpm": "rpm_limit", "tpm": "tpm_limit"}
        out = {rename.get(f, f): getattr(self, f) for f in self.model_fields_set if f in _Limits.model_fields}
        if out.get("expires_at") is not None and out["expires_at"].tzinfo is None:
            raise InvalidRequest("`expires_at` needs a UTC offset (e.g. 2027-01-01T00:00:00Z).", param="expires_at")
        return out


class KeyBody(_Limits):
    name: str | None = Field(None, min_length=1, max_length=128)
    owner: str | None = Field(None, max_length=256)
    team: str | None = None


class TeamBody(_Limits):
    name: str | None = Field(None, min_length=1, max_length=128)


async def _body(request: Request, model: type[BaseModel]) -> Any:
    try:
        return model.model_validate(orjson.loads(await request.body() or b"{}"))
    except orjson.JSONDecodeError:
        raise InvalidRequest("The body is not valid JSON.") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise InvalidRequest(f"Invalid body: {param}: {first['msg']}.", param=param) from None


async def _views(state: AppState) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    now = _persistence(state).wall()
    key_rows, team_rows = await _query(state, views, now)
    limits = state.limits
    if limits is None:
        return key_rows, team_rows
    # The live counters, where the limiter holds them (one store call for all).
    wanted = [(f"key:{r['name']}", r) for r in key_rows if r["budget_usd"] is not None and r["status"] == "active"]
    wanted += [(f"team:{r['name']}", r) for r in team_rows if r["budget_usd"] is not None]
    slots = [(scope, period_bounds(r["budget_period"], now)[0]) for scope, r in wanted]
    try:
        live = await limits.store.spend(slots) if slots else []
    except StoreUnavailable:  # the store is away: the recorded spend stands
        return key_rows, team_rows
    for (_, row), micro in zip(wanted, live):
        if micro is not None:
            row["spend_usd"] = round(micro / 1e6, 6)
            row["remaining_usd"] = round(max(0.0, row["budget_usd"] - micro / 1e6), 6)
            row["spend_source"] = "live"
    return key_rows, team_rows


def _one(rows: list[dict[str, Any]], name: str, what: str) -> dict[str, Any]:
    for row in rows:
        if row["name"] == name:
            return row
    raise NotFound(f"No {what} named `{name}`.", code=f"{what}_not_found")


def _repo_errors(exc: Exception) -> Exception:
    if isinstance(exc, key_repo.KeyNotFound):
        return NotFound(str(exc), code="team_not_found" if isinstance(exc, key_repo.TeamNotFound) else "key_not_found")
    if isinstance(exc, key_repo.KeyExists):
        err = InvalidRequest(str(exc), code="already_exists")
        err.status_code = 409
        return err
    if isinstance(exc, team_repo.TeamInUse):
        err = InvalidRequest(str(exc), code="team_in_use")
        err.status_code = 409
        return err
    return exc


async def _run(state: AppState, fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return await _query(state, fn, *args, **kwargs)
    except (key_repo.KeyNotFound, key_repo.KeyExists, team_repo.TeamInUse) as exc:
        raise _repo_errors(exc) from None


# --- keys --------------------------------------------------------------------------------------


async def list_keys(request: Request, state: AppState) -> Response:
    """Every key (never its secret) with its limits, spend and remaining budget."""
    rows, _ = await _views(state)
    return _json({"object": "list", "data": rows})


async def create_key(request: Request, state: AppState) -> Response:
    body: KeyBody = await _body(request, KeyBody)
    if not body.name:
        raise InvalidRequest("`name` is required.", param="name")
    if any(k.name == body.name for k in state.settings.auth.keys):
        raise InvalidRequest(f"`{body.name}` is already a key name in the config (auth.keys).", param="name")
    secret = await _run(state, key_repo.create_key, body.name, owner=body.owner, team=body.team, **body.columns())
    rows, _ = await _views(state)
    return _json({**_one(rows, body.name, "key"), "key": secret}, status=201)


async def get_key(request: Request, state: AppState) -> Response:
    rows, _ = await _views(state)
    return _json(_one(rows, request.path_params["name"], "key"))


async def update_key(request: Request, state: AppState) -> Response:
    name = request.path_params["name"]
    body: KeyBody = await _body(request, KeyBody)
    changes = body.columns()
    if "owner" in body.model_fields_set:
        changes["owner"] = body.owner
    team: object = body.team if "team" in body.model_fields_set else ...
    await _run(state, key_repo.update_key, name, team=team, **changes)
    rows, _ = await _views(state)
    return _json(_one(rows, name, "key"))


async def revoke_key(request: Request, state: AppState) -> Response:
    name = request.path_params["name"]
    await _run(state, key_repo.revoke_key, name)
    rows, _ = await _views(state)
    return _json(_one(rows, name, "key"))


async def rotate_key(request: Request, state: AppState) -> Response:
    """A new secret (shown once); the old one stops working at each gateway's next key refresh."""
    name = request.path_params["name"]
    secret = await _run(state, key_repo.rotate_key, name)
    rows, _ = await _views(state)
    return _json({**_one(rows, name, "key"), "key": secret})


# --- teams -------------------------------------------------------------------------------------


async def list_teams(request: Request, state: AppState) -> Response:
    _, rows = await _views(state)
    return _json({"object": "list", "data": rows})


async def create_team(request: Request, state: AppState) -> Response:
    body: TeamBody = await _body(request, TeamBody)
    if not body.name:
        raise InvalidRequest("`name` is required.", param="name")
    await _run(state, team_repo.create_team, body.name, **body.columns())
    _, rows = await _views(state)
    return _json(_one(rows, body.name, "team"), status=201)


async def get_team(request: Request, state: AppState) -> Response:
    _, rows = await _views(state)
    return _json(_one(rows, request.path_params["name"], "team"))


async def update_team(request: Request, state: AppState) -> Response:
    name = request.path_params["name"]
    body: TeamBody = await _body(request, TeamBody)
    await _run(state, team_repo.update_team, name, **body.columns())
    _, rows = await _views(state)
    return _json(_one(rows, name, "team"))


async def team_spend(request: Request, state: AppState) -> Response:
    """Spend per team and UTC day (its keys' together), for the last `days` days."""
    days = _int(request, "days", 30, 1, 3660)
    since = datetime.fromtimestamp(_persistence(state).wall(), UTC).date() - timedelta(days=days - 1)
    config_teams = {k.name: k.team for k in state.settings.auth.keys if k.team}
    rows = await _query(state, stats.spend_by_team, since, config_teams)
    return _json({"object": "list", "since": since.isoformat(), "data": rows})


async def delete_team(request: Request, state: AppState) -> Response:
    name = request.path_params["name"]
    await _run(state, team_repo.delete_team, name)
    return _json({"name": name, "deleted": True})


routes = [
    Route("/admin/api/keys", _handler(list_keys), methods=["GET"]),
    Route("/admin/api/keys", _handler(create_key), methods=["POST"]),
    Route("/admin/api/keys/{name}", _handler(get_key), methods=["GET"]),
    Route("/admin/api/keys/{name}", _handler(update_key), methods=["PATCH"]),
    Route("/admin/api/keys/{name}/revoke", _handler(revoke_key), methods=["POST"]),
    Route("/admin/api/keys/{name}/rotate", _handler(rotate_key), methods=["POST"]),
    Route("/admin/api/spend/teams", _handler(team_spend), methods=["GET"]),
    Route("/admin/api/teams", _handler(list_teams), methods=["GET"]),
    Route("/admin/api/teams", _handler(create_team), methods=["POST"]),
    Route("/admin/api/teams/{name}", _handler(get_team), methods=["GET"]),
    Route("/admin/api/teams/{name}", _handler(update_team), methods=["PATCH"]),
    Route("/admin/api/teams/{name}", _handler(delete_team), methods=["DELETE"]),
]


def openapi_paths(op: Any, listing: dict[str, Any]) -> dict[str, Any]:
    """This module's part of the admin API's OpenAPI description (`admin_openapi`)."""
    limits: dict[str, Any] = {
        "type": "object",
        "properties": {
            "rpm": {"type": ["integer", "null"], "minimum": 1},
            "tpm": {"type": ["integer", "null"], "minimum": 1},
            "max_parallel": {"type": ["integer", "null"], "minimum": 1},
            "budget_usd": {"type": ["number", "null"], "minimum": 0},
            "budget_period": {"enum": ["daily", "weekly", "monthly", "total", None]},
            "allowed_models": {"type": ["array", "null"], "items": {"type": "string"}},
            "allowed_regions": {"type": ["array", "null"], "items": {"type": "string"}},
            "data_collection": {"enum": ["allow", "deny", None]},
            "expires_at": {"type": ["string", "null"], "format": "date-time"},
            "metadata": {"type": ["object", "null"]},
        },
    }
    key_body = {**limits, "properties": {**limits["properties"], "name": {"type": "string"}, "owner": {"type": ["string", "null"]}, "team": {"type": ["string", "null"]}}}
    team_body = {**limits, "properties": {**limits["properties"], "name": {"type": "string"}}}
    return {
        "/admin/api/keys": {
            "get": op("Keys with their limits, spend and remaining budget", response=listing, errors=(503,)),
            "post": op("Create a key; the response holds its secret, shown only this once", body=key_body, errors=(400, 404, 409, 503)),
        },
        "/admin/api/keys/{name}": {
            "get": op("One key", errors=(404, 503)),
            "patch": op("Change a key's limits or team (null clears a limit)", body=key_body, errors=(400, 404, 503)),
        },
        "/admin/api/keys/{name}/revoke": {"post": op("Revoke a key", errors=(404, 503))},
        "/admin/api/keys/{name}/rotate": {"post": op("A new secret for a key (shown once)", errors=(404, 503))},
        "/admin/api/teams": {
            "get": op("Teams with their limits, keys, spend and remaining budget", response=listing, errors=(503,)),
            "post": op("Create a team", body=team_body, errors=(400, 409, 503)),
        },
        "/admin/api/spend/teams": {
            "get": op("Spend per team (its keys' together): totals and per-day rows", response=listing, errors=(400, 503)),
        },
        "/admin/api/teams/{name}": {
            "get": op("One team", errors=(404, 503)),
            "patch": op("Change a team's limits (null clears one)", body=team_body, errors=(400, 404, 503)),
            "delete": op("Delete a team no key belongs to", errors=(404, 409, 503)),
        },
    }
