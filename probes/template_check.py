"""At the start of an audit: does the endpoint render prompts as the reference does?

The same messages are sent to both (one output token each); a chat template or BOS handling that
differs shows as different reported `prompt_tokens` (SmolLM2's own template adds a default system
prompt: +24 tokens where a chatml format adds none). Compared with a reference that renders
differently, every logprob, distribution and usage comparison would differ without any fault, so
the runner then judges the endpoint against its own history only and says why ("template differs"),
instead of calling the difference drift.

Where the endpoint and the reference declare the same weights (`DeploymentConfig.weights`: a GGUF
carries its tokenizer and chat template, so declaring one asserts both), other counts are the
endpoint rendering (or counting) otherwise than the model's own template, and answers without counts
where the reference reports them leave its rendering unchecked: either is a failing `template`
result, a reference disagreement (SUSPECT, never demoted on it alone, until an independent test
confirms it). Without that, altering or leaving out reported usage bought an endpoint its way out of
every reference comparison for free. A passing check is no quality evidence (it says nothing about
what the model writes), except as the re-run of a template alarm. Not answering the check at all is
an availability error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from probes.base import Effect, ProbeResult, TemplateStatus
from probes.budget import BudgetExhausted
from probes.client import ProbeUnavailable
from probes.tasks import gather_or_cancel

# Shaped like user requests: without and with a system prompt (a default system prompt shows in the first).
MESSAGES: tuple[list[dict[str, str]], ...] = (
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a helpful assistant."},
     {"role": "user", "content": "Give me one word that means happy."}],
)

if TYPE_CHECKING:
    from gateway.catalog import Endpoint


class ChatClient(Protocol):
    async def chat(self, body: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class TemplateCheck:
    status: TemplateStatus
    endpoint: list[int | None] = field(default_factory=list)  # reported prompt_tokens per message set
    reference: list[int | None] = field(default_factory=list)
    reason: str = ""
    endpoint_unanswered: tuple[int, ...] = ()  # message sets the endpoint did not answer at all

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "endpoint_prompt_tokens": self.endpoint,
                "reference_prompt_tokens": self.reference, "reason": self.reason,
                "endpoint_unanswered": list(self.endpoint_unanswered)}


def compare(endpoint: Sequence[int | None], reference: Sequence[int | None]) -> TemplateCheck:
    """Pure: identical counts for every message set where both reported one; unknown without a pair."""
    pairs = [(a, b) for a, b in zip(endpoint, reference, strict=True) if a is not None and b is not None]
    e, r = list(endpoint), list(reference)
    if not pairs:
        return TemplateCheck("unknown", e, r, "no prompt_tokens reported by both sides")
    diffs = sorted({a - b for a, b in pairs})
    if diffs == [0]:
        return TemplateCheck("same", e, r, "the same prompt_tokens for the same messages")
    return TemplateCheck(
        "differs", e, r,
        f"template differs: the endpoint reports {e} prompt tokens where the reference reports {r} for the same "
        "messages (another chat template or BOS handling)",
    )


async def _counts(client: ChatClient) -> tuple[list[int | None], tuple[int, ...]]:
    """Reported prompt_tokens per message set, and the sets that got no answer at all."""
    out: list[int | None] = []
    unanswered: list[int] = []
    for i, messages in enumerate(MESSAGES):
        try:
            answer = await client.chat({"messages": messages, "max_tokens": 1, "temperature": 0})
        except (ProbeUnavailable, BudgetExhausted):
            out.append(None)
            unanswered.append(i)
            continue
        value = (answer.get("usage") or {}).get("prompt_tokens")
        out.append(int(value) if isinstance(value, int | float) and value > 0 else None)
    return out, tuple(unanswered)


async def check(endpoint: ChatClient, reference: ChatClient) -> TemplateCheck:
    (mine, unanswered), (theirs, _) = await gather_or_cancel(_counts(endpoint), _counts(reference))
    return replace(compare(mine, theirs), endpoint_unanswered=unanswered)


def same_weights(endpoint: Endpoint, reference: Endpoint) -> bool:
    """Whether both declare the same weights (`DeploymentConfig.weights`, case-insensitive)."""
    mine, theirs = endpoint.deployment.weights, reference.deployment.weights
    return mine is not None and theirs is not None and mine.casefold() == theirs.casefold()


class TemplateResult:
    """The check as a round's result, where it is evidence: against a reference of the same weights."""

    name: ClassVar[str] = "template"
    effect: ClassVar[Effect] = "suspect"

    def judge(
        self, check: TemplateCheck, endpoint: Endpoint, reference: Endpoint, *, rerun: bool = False
    ) -> ProbeResult | None:
        """A fail where the endpoint renders otherwise or answered without counts the reference gave;
        an error where it did not answer; a pass only as the re-run of a template alarm (`rerun`)."""
        if not same_weights(endpoint, reference):
            return None
        details = {**check.as_json(), "weights": endpoint.deployment.weights}
        pairs = sum(a is not None and b is not None for a, b in zip(check.endpoint, check.reference, strict=True))
        # Answered, but without the count the reference gave for the same messages.
        uncounted = [i for i, (a, b) in enumerate(zip(check.endpoint, check.reference, strict=True))
                     if a is None and b is not None and i not in check.endpoint_unanswered]
        if check.status == "differs" or uncounted:
            if check.status != "differs":
                details["reason"] = (f"the endpoint reports {check.endpoint} prompt tokens where the reference reports "
                                     f"{check.reference}: its rendering of the model's template cannot be checked")
            return ProbeResult(self.name, "fail", pairs, effect=self.effect, grounds="reference", details=details)
        if check.endpoint_unanswered:
            n = len(check.endpoint_unanswered)
            return ProbeResult(self.name, "error", pairs, effect=self.effect, errors=n,
                               details={**details, "error": f"{n} template-check requests failed"})
        if check.status == "same" and rerun:
            return ProbeResult(self.name, "pass", pairs, effect=self.effect, grounds="reference", details=details)
        if check.status == "unknown" and rerun:  # no pair of counts (or no time for one): the alarm stays open
            return ProbeResult(self.name, "inconclusive", pairs, effect=self.effect, grounds="reference",
                               details={**details, "reason": check.reason or "the reference reported no prompt_tokens"})
        return None
