"""What every admin API handler shares (admin key guard, JSON replies, database queries off the
event loop); the admin API's modules (`admin_api`, `admin_keys`, `admin_probes`) build on it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.admin import _guard
from gateway.persistence.runtime import Persistence
from gateway.state import AppState
from kernel.errors import InvalidRequest, Unavailable

T = TypeVar("T")


def _json(data: Any, status: int = 200) -> Response:
    # Row keys are str subclasses (quoted_name), which orjson only takes with OPT_NON_STR_KEYS.
    body = orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
    return Response(body, status_code=status, media_type="application/json")


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise InvalidRequest(f"`{name}` must be an integer from {low} to {high}.", param=name)
    return int(raw)


def _persistence(state: AppState) -> Persistence:
    if state.persistence is None:
        raise Unavailable("Persistence is disabled: set persistence.enabled.", code="persistence_disabled")
    return state.persistence


async def _query(state: AppState, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    p = _persistence(state)
    try:
        return await p.db.run(fn, *args, **kwargs)
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().split("\n")[0]
        raise Unavailable(f"The database is unavailable: {reason}", code="database_unavailable") from None


def _handler(fn: Callable[[Request, AppState], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """Guard with the admin key (a gateway error becomes OpenAI error JSON in the app's handler)."""

    async def endpoint(request: Request) -> Response:
        _guard(request)
        return await fn(request, request.state.gw)

    endpoint.__name__ = fn.__name__
    endpoint.__doc__ = fn.__doc__
    return endpoint
