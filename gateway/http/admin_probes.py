"""On-demand probe audits over the admin API (admin key only).

    POST /admin/api/probes/run  {"provider": "x", "model": "m", "endpoint": "id", "probes": ["quality"]}
    GET  /admin/api/probes/fleet  the current audit round's false discovery control (probes.fleet)

The body is checked before anything runs (unknown provider, endpoint or probe: OpenAI-style
400/404 JSON). Then the answer streams as NDJSON: one JSON object a line, the runner's progress
events (started, probe, progress, result, confirm, transition, finished) for each selected
endpoint, and last a summary `{"event": "summary", "object": "probe.audit", "verdict", "runs"}`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gateway.catalog import Endpoint
from gateway.http.admin_handlers import _handler
from gateway.state import AppState
from gateway.state_store import StoreUnavailable
from kernel.errors import InvalidRequest, NotFound, Unavailable
from probes.registry import UnknownProbe
from probes.runner import ProbeRunner

DEFAULT_PROBES = ("quality",)
_DONE = object()


def _strings(body: dict[str, Any], name: str) -> list[str] | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise InvalidRequest(f"`{name}` must be a non-empty list of names.", param=name)
    return value


def _optional(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidRequest(f"`{name}` must be a non-empty string.", param=name)
    return value


def select_endpoints(state: AppState, provider: str | None, model: str | None, endpoint: str | None) -> list[Endpoint]:
    eps = list(state.catalog.endpoints)
    if endpoint is not None:
        if endpoint not in state.catalog.by_id:
            raise NotFound(f"No endpoint `{endpoint}`.", code="endpoint_not_found", param="endpoint")
        eps = [state.catalog.by_id[endpoint]]
    if provider is not None:
        if not any(ep.provider == provider for ep in state.catalog.endpoints):
            known = ", ".join(sorted({ep.provider for ep in state.catalog.endpoints}))
            raise NotFound(f"No provider `{provider}`; known: {known}.", code="provider_not_found", param="provider")
        eps = [ep for ep in eps if ep.provider == provider]
    if model is not None:
        if not state.catalog.has_model(model):
            raise NotFound(f"No model `{model}`.", code="model_not_found", param="model")
        eps = [ep for ep in eps if ep.model == model]
    if endpoint is None and provider is None and model is None:
        raise InvalidRequest("Say what to probe: `provider`, `model` or `endpoint`.", param="provider")
    if not eps:
        raise NotFound("No endpoint matches that provider, model and endpoint.", code="endpoint_not_found")
    return eps


def _runner(state: AppState) -> ProbeRunner:
    assert state.probes is not None  # gateway.runtime.build_state always builds it
    return state.probes


async def run_probes(request: Request, state: AppState) -> Response:
    """Run the selected probes on the selected endpoints now; stream progress, then the summary."""
    try:
        body = orjson.loads(await request.body() or b"{}")
    except orjson.JSONDecodeError:
        raise InvalidRequest('The body must be JSON: {"provider": ..., "probes": [...]}.') from None
    if not isinstance(body, dict):
        raise InvalidRequest("The body must be a JSON object.")
    endpoints = select_endpoints(state, _optional(body, "provider"), _optional(body, "model"), _optional(body, "endpoint"))
    runner = _runner(state)
    try:
        probes = runner.registry.expand(_strings(body, "probes") or DEFAULT_PROBES)
    except UnknownProbe as exc:
        raise InvalidRequest(f"{exc}.", param="probes", code="probe_not_found") from None
    return StreamingResponse(_stream(runner, endpoints, probes), media_type="application/x-ndjson")


async def _stream(runner: ProbeRunner, endpoints: list[Endpoint], probes: list[str]) -> AsyncIterator[bytes]:
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def audit() -> list[dict[str, Any]]:
        try:
            reports = []
            for ep in endpoints:
                report = await runner.run(ep.id, probes, trigger="manual", emit=queue.put_nowait)
                reports.append(report.as_json())
            return reports
        finally:
            queue.put_nowait(_DONE)

    task = asyncio.get_running_loop().create_task(audit(), name="probe-audit")
    try:
        while (event := await queue.get()) is not _DONE:
            yield orjson.dumps(event, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        try:
            runs = await task
        except Exception as exc:  # the stream has started: report the failure in it
            yield orjson.dumps({"event": "error", "message": f"{type(exc).__name__}: {exc}"}) + b"\n"
            return
        verdict = "fail" if any(r["verdict"] == "fail" for r in runs) else "pass"
        summary = {"event": "summary", "object": "probe.audit", "verdict": verdict, "probes": probes, "runs": runs}
        yield orjson.dumps(summary, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
    finally:
        if not task.done():  # the client went away: stop the audit
            task.cancel()


async def fleet(request: Request, state: AppState) -> Response:
    """The round's e-BH figures: alpha (the FDR bound), n, each endpoint's e-value, demoted and held."""
    ledger = _runner(state).fleet
    if ledger is None:
        body: dict[str, Any] = {"object": "probe.fleet", "method": None, "alpha": None,
                                "reason": "probes.fleet.enabled is false: demotions are not gated fleet-wide"}
    else:
        try:
            body = await ledger.snapshot(now=state.persistence.wall() if state.persistence is not None else time.time())
        except StoreUnavailable as exc:
            raise Unavailable(f"The shared state store is unavailable: {exc}", code="store_unavailable") from None
    return Response(orjson.dumps(body), media_type="application/json", headers={"cache-control": "no-store"})


routes = [
    Route("/admin/api/probes/run", _handler(run_probes), methods=["POST"]),
    Route("/admin/api/probes/fleet", _handler(fleet), methods=["GET"]),
]
