"""How long an audit may run, and each probe's share of it.

An audit ends within `probes.audit.seconds` (`AuditSettings`). The first round ends
`confirm_share` of that before the audit does, which leaves time for a confirmatory round; within a
round a probe may run until the round's end less `keep_seconds` for each probe after it, or, when
too little is left for that, an even share of what is left. A probe that finishes early leaves its
time to the probes after it. Times are the event loop's clock (`asyncio.timeout_at`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from probes.settings import AuditSettings


@dataclass(frozen=True, slots=True)
class AuditClock:
    ends: float
    first_round_ends: float
    keep_seconds: float

    @classmethod
    def start(cls, now: float, settings: AuditSettings) -> AuditClock:
        ends = now + settings.seconds
        return cls(ends, ends - settings.seconds * settings.confirm_share, settings.keep_seconds)

    def round_end(self, *, confirm: bool) -> float:
        return self.ends if confirm else self.first_round_ends

    def probe_end(self, now: float, *, confirm: bool, after: int) -> float:
        """When the next probe must end, with `after` probes still to run after it in this round."""
        left = max(0.0, self.round_end(confirm=confirm) - now)
        kept = min(self.keep_seconds * after, left * after / (after + 1))
        return now + left - kept


SPARE_S = 5.0  # a probe stops this long (at most a tenth of its time left) before the runner would stop it


def stop_at(deadline: float | None) -> float | None:
    """When a probe that can judge what it has stops starting work (the event loop's clock): a
    spare moment before its `deadline`, to judge and store what it has; None: no end."""
    if deadline is None:
        return None
    left = max(0.0, deadline - asyncio.get_running_loop().time())
    return deadline - min(SPARE_S, 0.1 * left)
