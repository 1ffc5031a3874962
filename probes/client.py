"""Probe traffic to one endpoint, sent directly (no routing, no retries, no fallback) through the
endpoint's own adapter and the gateway's HTTP client, marked with `x-gateway-probe: 1`.

Every request is counted against the endpoint's daily budget; tokens come from the reported usage.
An upstream failure raises `ProbeUnavailable`, which the runner counts as availability evidence.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kernel.errors import GatewayError
from probes.budget import ProbeBudget

if TYPE_CHECKING:
    from gateway.catalog import Endpoint
    from kernel.values import Operation
    from providers.http import HTTPClient, Timeouts

PROBE_HEADER = "x-gateway-probe"


class ProbeUnavailable(Exception):
    """The endpoint did not answer a probe request (connection, timeout, 5xx, bad body)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ContextOverflow(ProbeUnavailable):
    """The endpoint refused the request as longer than its context window: the request's doing
    (an agent's growing transcript), not the endpoint's, so it is not counted as an error."""


_CONTEXT_WORDS = ("context length", "context window", "context_length", "maximum context")


def _refusal(message: str, status: int) -> ProbeUnavailable:
    if status == 400 and any(word in message.lower() for word in _CONTEXT_WORDS):
        return ContextOverflow(message, status=status)
    return ProbeUnavailable(message, status=status)


class ProbeClient:
    def __init__(self, endpoint: Endpoint, http: HTTPClient, timeouts: Timeouts, budget: ProbeBudget) -> None:
        self.endpoint = endpoint
        self._http = http
        self._timeouts = timeouts
        self._budget = budget
        self.requests = 0
        self.tokens = 0
        self.errors = 0

    @property
    def endpoint_id(self) -> str:
        return self.endpoint.id

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """One non-streaming chat completion; `model` is filled in. Returns the OpenAI-shaped JSON."""
        return await self._call("chat", body)

    async def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call("completions", body)

    async def _call(self, op: Operation, body: dict[str, Any]) -> dict[str, Any]:
        ep = self.endpoint
        self._budget.reserve(ep.id)
        self.requests += 1
        payload = {**body, "model": ep.model, "stream": False}
        request = ep.adapter.build_request(ep.target, op, payload, False)
        request = replace(request, headers={**request.headers, PROBE_HEADER: "1"})
        try:
            response = await self._http.send(request, self._timeouts, ep.id)
            try:
                raw = await response.read()
                if response.status >= 400:
                    error = ep.adapter.map_error(ep.target, response.status, response.headers, raw)
                    raise _refusal(f"{ep.id}: {error.message}", response.status)
                parsed = ep.adapter.parse_response(ep.target, op, raw)
            finally:
                response.close()
            data: dict[str, Any] = json.loads(parsed.body)
        except ContextOverflow:
            raise
        except ProbeUnavailable:
            self.errors += 1
            raise
        except GatewayError as exc:
            self.errors += 1
            raise ProbeUnavailable(f"{ep.id}: {exc.message}", status=exc.status_code) from None
        except ValueError as exc:
            self.errors += 1
            raise ProbeUnavailable(f"{ep.id}: unreadable response: {exc}") from None
        usage = data.get("usage") or {}
        spent = int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
        self.tokens += spent
        self._budget.record_tokens(ep.id, spent)
        return data
