"""Resolve the requested model to the endpoints that can serve this request.

An endpoint is kept only if it supports the operation and every capability the body uses (the
rules: `gateway.routing.capabilities`, which the routing filters apply too). When none does, the
400 names the parameter no candidate supports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.catalog import Catalog, Endpoint
from gateway.routing import capabilities
from kernel.deployment import Capabilities
from kernel.errors import UnsupportedParameter
from kernel.values import Operation


def _requirements(op: Operation, body: dict[str, Any]) -> list[tuple[str, Callable[[Capabilities], str | None]]]:
    """(param, rule) for each capability the request needs (`gateway.routing.capabilities`)."""
    needs, top = capabilities.requested(op, body)
    n = body.get("n")
    choices = n if op != "embeddings" and isinstance(n, int) and n > 1 else 1
    out = []
    for reason, rule in capabilities.rules(needs, top, choices):
        # A completion's top logprobs are its `logprobs` parameter.
        param = "logprobs" if reason == "top_logprobs" and op != "chat" else reason
        out.append((param, rule))
    return out


def _unsupported(model: str, param: str, body: dict[str, Any], candidates: tuple[Endpoint, ...]) -> str:
    if param == "n":
        limit = max(ep.deployment.capabilities.max_fanout_n for ep in candidates)
        return (
            f"Invalid 'n': {body['n']} choices exceed the limit of {limit} on the deployments of `{model}`, "
            "which answer one choice per request."
        )
    return f"No deployment of `{model}` supports the parameter '{param}' with this value."


def resolve(catalog: Catalog, op: Operation, model: str, body: dict[str, Any]) -> tuple[Endpoint, ...]:
    candidates = tuple(ep for ep in catalog.candidates(model) if capabilities.serves(ep.deployment.capabilities, op))
    if not candidates:
        raise UnsupportedParameter(
            f"The model `{model}` does not support the {op} endpoint on any configured deployment.", param="model"
        )
    for param, rule in _requirements(op, body):
        kept = tuple(ep for ep in candidates if rule(ep.deployment.capabilities) is None)
        if not kept:
            raise UnsupportedParameter(_unsupported(model, param, body, candidates), param=param)
        candidates = kept
    return candidates
