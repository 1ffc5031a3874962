"""The usage-consistency check of a probe round: no requests of its own, it reads the `prompt_tokens`
the endpoint reported for every probe request of the round (`ProbeClient.prompt_counts`) and fails
when identical prompts were counted differently (`probes.stats.consistency`): a share of requests
served by another model (another tokenizer or template) under the same name.

It cannot see a substitute that tokenizes and templates as the claimed model does (a smaller model
of the same family, another quantization of the same weights), nor one that reports the claimed
model's counts. Its alarm is confirmed by the probes that send repeated prompts (probes.registry).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from probes.base import Effect, ProbeResult
from probes.settings import ProbeSettings
from probes.stats.consistency import usage_consistency
from probes.windowed import judged

NAME = "consistency"


class UsageConsistency:
    name: ClassVar[str] = NAME
    effect: ClassVar[Effect] = "confirm"

    def judge(
        self, records: Sequence[tuple[str, int | None]], settings: ProbeSettings, *, confirm: bool
    ) -> ProbeResult | None:
        """The round's result: None when no prompt was answered twice (no evidence either way),
        inconclusive when prompts were repeated but no answer reported prompt_tokens."""
        own = settings.consistency
        outcome = usage_consistency(records, own.tolerated_share)
        if outcome is None:
            fingerprints = [fp for fp, _ in records]
            if len(set(fingerprints)) == len(fingerprints):
                return None
            return ProbeResult(self.name, "inconclusive", 0, effect=self.effect,
                               details={"reason": "repeated prompts, but no answer reported prompt_tokens"})
        alpha = settings.health.confirm_alpha if confirm else own.alpha
        verdict, outcome = judged(outcome, alpha, settings.health)
        return ProbeResult.of(self.name, verdict, outcome, effect=self.effect, grounds="self", alpha=alpha,
                              fleet_weight=own.fleet_weight)
