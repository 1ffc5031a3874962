"""The admin API's OpenAPI 3.1 description, served at ``/admin/api/openapi.json``.

Written by hand next to the routes; a test checks that every admin route is described.
"""

from __future__ import annotations

from typing import Any

_ERROR = {"$ref": "#/components/schemas/Error"}
_LIST: dict[str, Any] = {
    "type": "object",
    "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": {"type": "object"}}},
}


def _q(name: str, description: str, schema: dict[str, Any] | None = None, required: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": schema or {"type": "string"},
    }


def _op(
    summary: str,
    *,
    params: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    response: dict[str, Any] | None = None,
    errors: tuple[int, ...] = (),
) -> dict[str, Any]:
    responses: dict[str, Any] = {
        "200": {"description": "OK", "content": {"application/json": {"schema": response or {"type": "object"}}}}
    }
    for status in (401, 403, *errors):
        responses[str(status)] = {"description": _REASONS[status], "content": {"application/json": {"schema": _ERROR}}}
    op: dict[str, Any] = {
        "summary": summary,
        "security": [{"adminKey": []}],
        "parameters": params or [],
        "responses": responses,
    }
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    return op


_REASONS = {
    400: "Bad parameter",
    401: "No or wrong key",
    403: "Not the admin key, or the admin API is disabled",
    404: "Unknown endpoint or run",
    409: "Already exists, or still in use",
    503: "Persistence disabled or database unavailable",
}

_ENDPOINT = _q("endpoint", "Endpoint id (as in the catalog)")
_LIMIT = _q("limit", "Most rows to return (1-1000)", {"type": "integer", "minimum": 1, "maximum": 1000})
_MANUAL = {
    "type": "object",
    "required": ["endpoint", "reason"],
    "properties": {
        "endpoint": {"type": "string"},
        "reason": {"type": "string", "minLength": 1},
        "actor": {"type": "string", "maxLength": 128, "default": "admin"},
    },
}
_WINDOW = {
    "type": "object",
    "properties": {
        "requests": {"type": "integer"},
        "errors": {"type": "integer"},
        "error_rate": {"type": "number"},
        "prompt_tokens": {"type": "integer"},
        "cached_tokens": {"type": "integer"},
        "completion_tokens": {"type": "integer"},
        "cache_hit_rate": {"type": ["number", "null"], "description": "cached / prompt tokens"},
        "cost_usd": {"type": "number"},
        "latency_ms": {"type": ["object", "null"], "description": "p50, p95, p99 of successful requests"},
        "ttft_ms": {"type": ["object", "null"], "description": "p50, p95 of streams"},
        "overhead_ms": {"type": ["object", "null"], "description": "p50, p99"},
        "requests_by_api": {
            "type": "object",
            "additionalProperties": {"type": "integer"},
            "description": "requests by the API the client spoke: chat, completions, embeddings, responses, messages",
        },
    },
}


def openapi() -> dict[str, Any]:
    paths = {
        "/admin/api/endpoints": {
            "get": _op("Endpoints with breaker state and in-memory totals since start", response=_LIST)
        },
        "/admin/api/engines": {"get": _op("Local engines and their replicas", response=_LIST)},
        "/admin/api/endpoints/stats": {
            "get": _op(
                "Endpoints with health state, score, breaker, and figures over each window",
                params=[_q("windows", "Comma-separated durations, e.g. 5m,1h,24h (at most 6)")],
                response={
                    **_LIST,
                    "properties": {
                        **_LIST["properties"],
                        "windows": {"type": "array"},
                        "data": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "id": {"type": "string"},
                                    "state": {"enum": ["healthy", "suspect", "demoted", "probation"]},
                                    "score": {"type": ["number", "null"]},
                                    "breaker": {"type": "object"},
                                    "windows": {"type": "object", "additionalProperties": _WINDOW},
                                },
                            },
                        },
                    },
                },
                errors=(400, 503),
            )
        },
        "/admin/api/endpoints/timeseries": {
            "get": _op(
                "One endpoint's figures per time bucket",
                params=[
                    {**_ENDPOINT, "required": True},
                    _q("window", "How far back, e.g. 24h"),
                    _q("bucket", "Bucket width, e.g. 5m"),
                ],
                errors=(400, 404, 503),
            )
        },
        "/admin/api/probes/runs": {
            "get": _op("Probe runs, newest first", params=[_ENDPOINT, _LIMIT], response=_LIST, errors=(400, 404, 503))
        },
        "/admin/api/probes/runs/{run_id}": {
            "get": {
                **_op("One probe run with its per-probe results", errors=(404, 503)),
                "parameters": [{"name": "run_id", "in": "path", "required": True, "schema": {"type": "integer"}}],
            }
        },
        "/admin/api/probes/run": {
            "post": {
                **_op(
                    "Run probes on an endpoint now (an on-demand audit): NDJSON progress events, then a summary",
                    body={
                        "type": "object",
                        "properties": {
                            "provider": {"type": "string"},
                            "model": {"type": "string"},
                            "endpoint": {"type": "string"},
                            "probes": {
                                "type": "array",
                                "items": {"type": "string"},
                                "description": "Probe or suite names (default: the quality suite)",
                            },
                        },
                    },
                    errors=(400, 404),
                ),
                "responses": {
                    **_op("", errors=(400, 404))["responses"],
                    "200": {
                        "description": "One JSON event a line; the last is the summary (verdict, runs, transitions)",
                        "content": {"application/x-ndjson": {"schema": {"type": "object"}}},
                    },
                },
            }
        },
        "/admin/api/probes/fleet": {
            "get": _op("The audit round's fleet-wide false discovery control: e-BH alpha, n, e-values, demoted, held",
                       errors=(503,))
        },
        "/admin/api/health": {"get": _op("Current health state of every endpoint", response=_LIST)},
        "/admin/api/health/transitions": {
            "get": _op(
                "Health-state transitions with reason and evidence, newest first",
                params=[_ENDPOINT, _LIMIT],
                response=_LIST,
                errors=(400, 404, 503),
            )
        },
        "/admin/api/health/demote": {
            "post": _op("Demote an endpoint by hand (recorded with the reason)", body=_MANUAL, errors=(400, 404))
        },
        "/admin/api/health/restore": {
            "post": _op("Restore an endpoint by hand (recorded with the reason)", body=_MANUAL, errors=(400, 404))
        },
        "/admin/api/actions": {
            "get": _op(
                "Manual actions: who demoted or restored what",
                params=[_ENDPOINT, _LIMIT],
                response=_LIST,
                errors=(400, 404, 503),
            )
        },
        "/admin/api/spend": {
            "get": _op(
                "Spend per key: totals and per-day rows",
                params=[
                    _q("days", "Days back, today included (1-3660)", {"type": "integer"}),
                    _q("key", "Only this key name"),
                ],
                response=_LIST,
                errors=(400, 503),
            )
        },
        "/admin/api/route/explain": {
            "post": _op(
                "Explain how a request would be routed now (no dispatch, nothing counted)",
                body={
                    "type": "object",
                    "required": ["body"],
                    "properties": {
                        "body": {"type": "object", "description": "The OpenAI request body"},
                        "op": {"enum": ["chat", "completions", "embeddings"], "default": "chat"},
                        "key": {"type": ["string", "null"], "description": "Route as this key name"},
                    },
                },
                errors=(400, 404),
            )
        },
        "/admin/api/persistence": {"get": _op("Record queue, spill file and writer counters", errors=(503,))},
        "/admin/api/openapi.json": {"get": _op("This description")},
    }
    from gateway.http.admin_keys import openapi_paths  # keys and teams: their own module

    paths.update(openapi_paths(_op, _LIST))
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "LLM gateway admin API",
            "version": "1",
            "description": "Admin key only (Authorization: Bearer <admin key>).",
        },
        "paths": paths,
        "components": {
            "securitySchemes": {"adminKey": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "properties": {
                        "error": {
                            "type": "object",
                            "properties": {
                                "message": {"type": "string"},
                                "type": {"type": "string"},
                                "param": {"type": ["string", "null"]},
                                "code": {"type": ["string", "null"]},
                            },
                        }
                    },
                }
            },
        },
    }
