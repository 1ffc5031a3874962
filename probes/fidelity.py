"""Sampling fidelity: one-token samples at the requested temperature, with logprobs, tested (χ²)
against the distribution the endpoint's own logprobs imply at that temperature, truncated to any
prefix the settings tolerate (`probes.stats.fidelity`: a provider's top-k or min-p cut of the tail
passes). Logprobs are reported before temperature, so this is what catches an ignored or changed
temperature."""

from __future__ import annotations

import asyncio
from collections import Counter
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from probes.base import Effect, Outcome, ProbeContext, ProbeResult
from probes.client import ProbeUnavailable
from probes.logprob_drift import first_token, logprobs_reason
from probes.stats.fidelity import fidelity_test
from probes.traffic import conversation, first_token_budget
from probes.windowed import Meter, judged, result

if TYPE_CHECKING:
    from gateway.catalog import Endpoint


class Chat(Protocol):
    async def chat(self, body: dict[str, Any]) -> dict[str, Any]: ...


async def sample_token(
    client: Chat, prompt: str | dict[str, Any], *, temperature: float, top_logprobs: int, seed: int,
    max_tokens: int = 1,
) -> tuple[str | None, dict[str, float]]:
    """One sampled first token of the answer to `prompt` (a user message, or a request's
    `messages` and `tools`), and that position's top logprobs; `max_tokens` does not change it."""
    frame = {"messages": [{"role": "user", "content": prompt}]} if isinstance(prompt, str) else prompt
    body = {
        **frame,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "top_p": 1,
        "logprobs": True,
        "top_logprobs": top_logprobs,
        "seed": seed,
    }
    return first_token(await client.chat(body))


def logprob_spread(tops: list[dict[str, float]]) -> float:
    """The largest range of one token's logprob across answers (0 when they all agree)."""
    common = set.intersection(*(set(t) for t in tops)) if tops else set()
    return max((max(t[k] for t in tops) - min(t[k] for t in tops) for k in common), default=0.0)


class Fidelity:
    name: ClassVar[str] = "fidelity"
    effect: ClassVar[Effect] = "evidence"

    def applicable(self, endpoint: Endpoint) -> str | None:
        return logprobs_reason(endpoint)

    async def run(self, ctx: ProbeContext) -> ProbeResult:
        settings = ctx.settings.fidelity
        k = min(settings.top_logprobs, ctx.endpoint.deployment.capabilities.max_top_logprobs)
        alpha = ctx.settings.health.confirm_alpha if ctx.confirm else settings.alpha
        samples = settings.samples * (settings.confirm_samples_factor if ctx.confirm else 1)
        counts: Counter[str] = Counter()
        tops: list[dict[str, float]] = []
        errors = 0
        meter = Meter(ctx, samples)
        traffic = ctx.settings.traffic
        # One conversation a round (the χ² is over samples of one distribution), drawn from the
        # user-like pool, so that no fixed prompt marks the probe; the temperature stays as set.
        # No tools: a tool call has no first token to count, and dropping those answers would
        # test the "no tool call" distribution against the full one (an honest endpoint fails).
        frame: str | dict[str, Any] = (
            conversation(ctx.rng, traffic, tools=False) if traffic.user_like else settings.prompt
        )
        for _ in range(samples):
            seed = int(ctx.rng.integers(2**31))
            try:
                token, top = await sample_token(
                    ctx.client, frame, temperature=settings.temperature, top_logprobs=k, seed=seed,
                    max_tokens=first_token_budget(ctx.rng, traffic),
                )
            except ProbeUnavailable:
                errors += 1
            else:
                if token is not None and top:
                    counts[token] += 1
                    tops.append(top)
            meter.step()
        spent = meter.spent(errors)
        if not tops:
            reason = "every request failed" if errors == spent["requests"] else "no answer carried logprobs"
            return result(self, "error", Outcome(statistic=0.0), spent, alpha, error=reason)

        # Against the mixture of every answer's logprobs (they can differ between requests: a
        # prefix cache's state). Up to ~20 likelihood fits (tens of ms on a busy machine): off the loop.
        outcome = await asyncio.to_thread(partial(
            fidelity_test, counts, tops, settings.temperature, min_p=settings.tolerated_min_p,
            top_k=settings.tolerated_top_k,
        ))
        verdict, outcome = judged(outcome, alpha, ctx.settings.health)
        return result(
            self, verdict, outcome, spent, alpha,
            top_logprobs=k, logprob_spread=round(logprob_spread(tops), 6), conversation=frame,
        )
