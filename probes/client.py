"""Probe traffic to one endpoint, sent directly (no routing, no retries, no fallback) through the
endpoint's own adapter and the gateway's HTTP client, by the dispatcher's own upstream call
(`providers.call`): built, sent and its errors mapped as a user's request is. The circuit breaker
hears nothing of it: probes must reach an endpoint whose breaker is open (a demoted or recovering
one is probed to decide its state), and their failures are the probes' availability evidence.

Nothing on the wire says "probe": a provider that could spot probes could serve them honestly and
users badly. The request is built exactly as the pipeline builds a user's (same adapter, same
client, same headers, and the `traceparent` a user's carries where tracing is on); the marker stays inside the gateway, as this client (its budget and counts),
and probe traffic never passes the pipeline, so it is in no user metric.

Every request is counted against the endpoint's daily budget; tokens come from the reported usage.
An upstream failure raises `ProbeUnavailable`, which the runner counts as availability evidence.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kernel.errors import GatewayError, ProviderError, ProviderRejected
from kernel.values import Usage
from probes.answer import readable
from probes.budget import ProbeBudget
from probes.prompt_identity import fingerprint, reported_prompt_tokens
from providers.call import call

if TYPE_CHECKING:
    from gateway.catalog import Endpoint
    from kernel.values import Operation
    from providers.http import HTTPClient, Timeouts


class ProbeUnavailable(Exception):
    """The endpoint did not answer a probe request (connection, timeout, 5xx, bad body)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ContextOverflow(ProbeUnavailable):
    """The endpoint refused the request as longer than its context window: the request's doing
    (an agent's growing transcript), not the endpoint's, so it is not counted as an error."""


class ProbeRejected(ProbeUnavailable):
    """The endpoint refused this request itself (a 4xx such as "cannot force a call among several
    tools"): it cannot serve this case, which a suite drops from its comparison and counts."""


_CONTEXT_WORDS = ("context length", "context window", "context_length", "maximum context")


def _refusal(message: str, status: int, error: GatewayError) -> ProbeUnavailable:
    if status == 400 and any(word in message.lower() for word in _CONTEXT_WORDS):
        return ContextOverflow(message, status=status)
    if isinstance(error, ProviderRejected):
        return ProbeRejected(message, status=status)
    return ProbeUnavailable(message, status=status)


# (operation, body with `model`, endpoint) -> the fields routing would add to a user's request.
UserShape = Callable[[str, dict[str, Any], "Endpoint"], dict[str, Any]]


# (operation, endpoint) -> the headers a user's request would carry besides the adapter's (tracing's).
UserHeaders = Callable[[str, "Endpoint"], dict[str, str]]


def _as_sent(op: str, body: dict[str, Any], endpoint: Endpoint) -> dict[str, Any]:
    return {}


def _no_headers(op: str, endpoint: Endpoint) -> dict[str, str]:
    return {}


class ProbeClient:
    def __init__(
        self, endpoint: Endpoint, http: HTTPClient, timeouts: Timeouts, budget: ProbeBudget,
        shape: UserShape = _as_sent,
        headers: UserHeaders = _no_headers,
        fresh: bool = False,
    ) -> None:
        self.endpoint = endpoint
        # True where the server is asked to evaluate logprob-reading prompts afresh (no prompt cache):
        # its windows are another series than a cached one (probes.logprob_drift keys them apart).
        self.fresh = fresh
        self._shape = shape
        self._headers = headers
        self._http = http
        self._timeouts = timeouts
        self._budget = budget
        self.requests = 0
        self.tokens = 0
        self.errors = 0
        # (prompt fingerprint, reported prompt_tokens or None) per answer: the round's usage-consistency check.
        self.prompt_counts: list[tuple[str, int | None]] = []

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
        # Laid out as a client's body through the pipeline: `model` first, `stream` only if asked.
        payload = {"model": ep.model, **{k: v for k, v in body.items() if k not in ("model", "stream")}}
        payload.update(self._shape(op, payload, ep))
        try:
            request = ep.adapter.build_request(ep.target, op, payload, False)
            if extra := self._headers(op, ep):
                request = replace(request, headers={**request.headers, **extra})
            parsed = await call(self._http, self._timeouts, ep, op, request, sent=payload)
            data = json.loads(parsed.body)
            if not isinstance(data, dict):
                raise ValueError("the answer is not a JSON object")
            data = readable(data)
        except ProviderError as exc:
            if exc.upstream_status is None:
                raise self._unavailable(exc) from None
            refusal = _refusal(f"{ep.id}: {exc.message}", exc.upstream_status, exc)  # the upstream's answer
            if not isinstance(refusal, ContextOverflow):
                self.errors += 1
            raise refusal from None
        except GatewayError as exc:  # the adapter refused to build it
            raise self._unavailable(exc) from None
        except ValueError as exc:
            self.errors += 1
            raise ProbeUnavailable(f"{ep.id}: unreadable response: {exc}") from None
        self.prompt_counts.append((fingerprint(payload), reported_prompt_tokens(data)))
        # The adapter's validated usage (a count that is no non-negative number is 0, one past the
        # cap is capped): the raw answer's could be a string, a list or negative.
        usage = parsed.usage or Usage.from_openai(data.get("usage"))
        spent = spent_tokens(usage, payload, data)
        self.tokens += spent
        self._budget.record_tokens(ep.id, spent)
        return data

    def _unavailable(self, exc: GatewayError) -> ProbeUnavailable:
        """The adapter refused the request, the transport failed or the answer was unreadable."""
        self.errors += 1
        kind = ProbeRejected if isinstance(exc, ProviderRejected) else ProbeUnavailable
        return kind(f"{self.endpoint.id}: {exc.message}", status=exc.status_code)


CHARS_PER_TOKEN = 4


def spent_tokens(usage: Usage | None, payload: dict[str, Any], answer: dict[str, Any]) -> int:
    """What one probe request cost the endpoint's budget: its counts, and where it left one out (no
    usage, no prompt count, no output count) an estimate at 4 characters a token, the prompt from
    the request's body and the output from the answer's text (at most max_tokens a choice). An
    endpoint that reports no usage must not make its probes free against `budget_tokens_per_day`."""
    prompt = usage.prompt_tokens if usage is not None and usage.prompt_reported else None
    completion = usage.completion_tokens if usage is not None and usage.completion_reported else None
    if prompt is None:
        prompt = math.ceil(len(json.dumps(payload.get("messages", payload.get("prompt", "")))) / CHARS_PER_TOKEN)
    if completion is None:
        choices = answer.get("choices")
        texts = [_choice_text(c) for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []
        completion = sum(math.ceil(len(t) / CHARS_PER_TOKEN) for t in texts)
        cap = payload.get("max_tokens")
        if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0:
            completion = min(completion, cap * max(1, len(texts)))
    return prompt + completion


def _choice_text(choice: dict[str, Any]) -> str:
    message = choice.get("message")
    parts: list[Any] = [choice.get("text")]
    if isinstance(message, dict):
        parts += [message.get("content"), message.get("reasoning_content")]
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                parts += [fn.get("name"), fn.get("arguments")]
    return "".join(part for part in parts if isinstance(part, str))
