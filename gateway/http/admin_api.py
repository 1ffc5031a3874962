"""Admin JSON API over persistence and health (admin key only): endpoint figures over windows,
time series, probe runs, health transitions, spend per key, manual demote and restore.

Handlers are thin: parse, run one query off the event loop (`Database.run`), serialise.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.health_states import DATABASE_SINK
from gateway.http.admin_handlers import _handler, _int, _json, _persistence, _query
from gateway.http.admin_openapi import openapi
from gateway.persistence import health as health_repo
from gateway.persistence import probes as probe_repo
from gateway.persistence import stats
from gateway.state import AppState
from kernel.errors import InvalidRequest, NotFound
from kernel.health import HealthState

T = TypeVar("T")
MAX_LIMIT = 1000
MAX_WINDOWS = 6
MAX_POINTS = 2000


def _limit(request: Request, default: int = 100) -> int:
    return _int(request, "limit", default, 1, MAX_LIMIT)


def _duration(request: Request, name: str, default: str) -> int:
    try:
        return stats.parse_duration(request.query_params.get(name, default))
    except ValueError as exc:
        raise InvalidRequest(str(exc), param=name) from None


def _endpoint(state: AppState, endpoint_id: str | None, *, required: bool = False) -> str | None:
    if endpoint_id is None:
        if required:
            raise InvalidRequest("`endpoint` is required.", param="endpoint")
        return None
    if endpoint_id not in state.catalog.by_id:
        raise NotFound(f"No endpoint `{endpoint_id}`.", code="endpoint_not_found", param="endpoint")
    return endpoint_id


# --- endpoints and their figures -------------------------------------------------------------


async def endpoint_stats(request: Request, state: AppState) -> Response:
    """Each endpoint: health state and score, breaker, and figures over each window."""
    raw = request.query_params.get("windows", "5m,1h,24h")
    names = [w.strip() for w in raw.split(",") if w.strip()][:MAX_WINDOWS]
    try:
        windows = {name: stats.parse_duration(name) for name in names}
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="windows") from None
    now = _persistence(state).wall()
    figures = {name: await _query(state, stats.endpoint_stats, now - seconds) for name, seconds in windows.items()}
    breakers = state.breaker.snapshot(state.clock())
    data = []
    for ep in state.catalog.endpoints:
        health = state.health.get(ep.id)
        data.append(
            {
                "id": ep.id,
                "model": ep.model,
                "provider": ep.provider,
                "ready": ep.is_ready(),
                "state": health.state,
                "manual": health.manual,
                "score": health.score,
                "state_reason": health.reason,
                "breaker": breakers.get(ep.id, {"state": "closed"}),
                "windows": {name: figures[name].get(ep.id) or _empty() for name in windows},
            }
        )
    return _json({"object": "list", "windows": list(windows), "data": data})


def _empty() -> dict[str, Any]:
    return {
        "requests": 0,
        "errors": 0,
        "error_rate": 0.0,
        "prompt_tokens": 0,
        "cached_tokens": 0,
        "completion_tokens": 0,
        "cache_hit_rate": None,
        "cost_usd": 0.0,
        "latency_ms": None,
        "ttft_ms": None,
        "overhead_ms": None,
    }


async def endpoint_timeseries(request: Request, state: AppState) -> Response:
    endpoint_id = _endpoint(state, request.query_params.get("endpoint"), required=True)
    window = _duration(request, "window", "24h")
    bucket = _duration(request, "bucket", "5m")
    if window // bucket > MAX_POINTS:
        raise InvalidRequest(f"window/bucket gives more than {MAX_POINTS} points; use a larger bucket.", param="bucket")
    now = _persistence(state).wall()
    series = await _query(state, stats.timeseries, endpoint_id, now - window, bucket)
    return _json(
        {"object": "timeseries", "endpoint": endpoint_id, "bucket_s": bucket, "window_s": window, "data": series}
    )


# --- probes and health -----------------------------------------------------------------------


async def probe_runs(request: Request, state: AppState) -> Response:
    endpoint_id = _endpoint(state, request.query_params.get("endpoint"))
    runs = await _query(state, probe_repo.list_runs, endpoint_id=endpoint_id, limit=_limit(request, 50))
    return _json({"object": "list", "data": runs})


async def probe_run(request: Request, state: AppState) -> Response:
    run = await _query(state, probe_repo.get_run, request.path_params["run_id"])
    if run is None:
        raise NotFound(f"No probe run {request.path_params['run_id']}.", code="probe_run_not_found")
    return _json(run)


async def health_states(request: Request, state: AppState) -> Response:
    data = [{"endpoint": ep.id, **asdict(state.health.get(ep.id))} for ep in state.catalog.endpoints]
    return _json({"object": "list", "data": data})


async def health_transitions(request: Request, state: AppState) -> Response:
    endpoint_id = _endpoint(state, request.query_params.get("endpoint"))
    rows = await _query(state, health_repo.list_transitions, endpoint_id=endpoint_id, limit=_limit(request))
    return _json({"object": "list", "data": rows})


async def manual_actions(request: Request, state: AppState) -> Response:
    endpoint_id = _endpoint(state, request.query_params.get("endpoint"))
    rows = await _query(state, health_repo.list_actions, endpoint_id=endpoint_id, limit=_limit(request))
    return _json({"object": "list", "data": rows})


async def _manual(request: Request, state: AppState, action: str) -> Response:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        raise InvalidRequest('The body must be JSON: {"endpoint": ..., "reason": ...}.') from None
    if not isinstance(body, dict):
        raise InvalidRequest("The body must be a JSON object.")
    endpoint_id = _endpoint(
        state, body.get("endpoint") if isinstance(body.get("endpoint"), str) else None, required=True
    )
    reason, actor = body.get("reason"), body.get("actor", "admin")
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidRequest("`reason` is required: say why.", param="reason")
    if not isinstance(actor, str) or not 0 < len(actor) <= 128:
        raise InvalidRequest("`actor` must be a name of up to 128 characters.", param="actor")
    assert endpoint_id is not None
    now = state.persistence.wall() if state.persistence is not None else time.time()
    to_state: HealthState = "demoted" if action == "demote" else "healthy"
    outcome: dict[str, bool] = {}
    transition = await state.health.transition(
        endpoint_id,
        to_state,
        source="manual",
        reason=reason.strip(),
        at=now,
        operator=True,
        evidence={"actor": actor, "action": action},
        actor=actor,
        action=action,
        outcome=outcome,
    )
    persisted = outcome.get(DATABASE_SINK) if transition is not None and state.persistence is not None else None
    current = state.health.get(endpoint_id)
    return _json(
        {
            "endpoint": endpoint_id,
            "action": action,
            "changed": transition is not None,
            "persisted": persisted,
            "state": current.state,
            "manual": current.manual,
        }
    )


async def demote(request: Request, state: AppState) -> Response:
    """Take an endpoint out of routing by hand; it stays out until restored by hand."""
    return await _manual(request, state, "demote")


async def restore(request: Request, state: AppState) -> Response:
    """Return an endpoint to healthy; probes take over its state again."""
    return await _manual(request, state, "restore")


# --- spend and persistence -------------------------------------------------------------------


async def spend(request: Request, state: AppState) -> Response:
    days = _int(request, "days", 30, 1, 3660)
    since = datetime.fromtimestamp(_persistence(state).wall(), UTC).date() - timedelta(days=days - 1)
    rows = await _query(state, stats.spend, since, key_name=request.query_params.get("key"))
    return _json({"object": "list", "since": since.isoformat(), "data": rows})


async def persistence_status(request: Request, state: AppState) -> Response:
    p = _persistence(state)
    return _json(
        {
            "queue_depth": len(p.queue),
            "queue_capacity": p.capacity,
            "spill_bytes": p.spill.size,
            "spill_pending": p.spill.pending(),
            **asdict(p.stats),
        }
    )


async def openapi_doc(request: Request, state: AppState) -> Response:
    return _json(openapi())


routes = [
    Route("/admin/api/endpoints/stats", _handler(endpoint_stats), methods=["GET"]),
    Route("/admin/api/endpoints/timeseries", _handler(endpoint_timeseries), methods=["GET"]),
    Route("/admin/api/probes/runs", _handler(probe_runs), methods=["GET"]),
    Route("/admin/api/probes/runs/{run_id:int}", _handler(probe_run), methods=["GET"]),
    Route("/admin/api/health", _handler(health_states), methods=["GET"]),
    Route("/admin/api/health/transitions", _handler(health_transitions), methods=["GET"]),
    Route("/admin/api/health/demote", _handler(demote), methods=["POST"]),
    Route("/admin/api/health/restore", _handler(restore), methods=["POST"]),
    Route("/admin/api/actions", _handler(manual_actions), methods=["GET"]),
    Route("/admin/api/spend", _handler(spend), methods=["GET"]),
    Route("/admin/api/persistence", _handler(persistence_status), methods=["GET"]),
    Route("/admin/api/openapi.json", _handler(openapi_doc), methods=["GET"]),
]
