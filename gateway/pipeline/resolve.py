"""Resolve the requested model to the endpoints that can serve this request.

An endpoint is kept only if it supports the operation and every capability the body uses.
When none does, the 400 names the parameter no candidate supports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.catalog import Catalog, Endpoint
from kernel.errors import UnsupportedParameter
from kernel.values import Operation


def _requested_top_logprobs(op: Operation, body: dict[str, Any]) -> int | None:
    if op == "chat":
        if not body.get("logprobs"):
            return None
        return int(body.get("top_logprobs") or 0)
    if op == "completions" and body.get("logprobs") is not None:
        return int(body["logprobs"])
    return None


def _requirements(op: Operation, body: dict[str, Any]) -> list[tuple[str, Callable[[Endpoint], bool]]]:
    """(param, predicate) for each capability the request needs."""
    needs: list[tuple[str, Callable[[Endpoint], bool]]] = []
    if body.get("tools") and body.get("tool_choice") != "none":
        needs.append(("tools", lambda ep: ep.deployment.capabilities.tools))
    n = body.get("n")
    if op != "embeddings" and isinstance(n, int) and n > 1:
        # Without native `n` every choice is another upstream request: bounded per deployment.
        needs.append(("n", lambda ep: (caps := ep.deployment.capabilities).native_n or n <= caps.max_fanout_n))
    top = _requested_top_logprobs(op, body)
    if top is not None:
        needs.append(("logprobs", lambda ep: ep.deployment.capabilities.logprobs))
        if top > 0:
            param = "top_logprobs" if op == "chat" else "logprobs"
            needs.append((param, lambda ep: ep.deployment.capabilities.max_top_logprobs >= top))
    return needs


def _unsupported(model: str, param: str, body: dict[str, Any], candidates: tuple[Endpoint, ...]) -> str:
    if param == "n":
        limit = max(ep.deployment.capabilities.max_fanout_n for ep in candidates)
        return (
            f"Invalid 'n': {body['n']} choices exceed the limit of {limit} on the deployments of `{model}`, "
            "which answer one choice per request."
        )
    return f"No deployment of `{model}` supports the parameter '{param}' with this value."


def resolve(catalog: Catalog, op: Operation, model: str, body: dict[str, Any]) -> tuple[Endpoint, ...]:
    candidates = tuple(ep for ep in catalog.candidates(model) if op in ep.deployment.capabilities.modes)
    if not candidates:
        raise UnsupportedParameter(
            f"The model `{model}` does not support the {op} endpoint on any configured deployment.", param="model"
        )
    for param, supported in _requirements(op, body):
        kept = tuple(ep for ep in candidates if supported(ep))
        if not kept:
            raise UnsupportedParameter(_unsupported(model, param, body, candidates), param=param)
        candidates = kept
    return candidates
