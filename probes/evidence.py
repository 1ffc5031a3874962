"""Each endpoint's accumulated probe evidence, kept in the shared state store so that every gateway
replica (and `gwctl worker`) decides on the same numbers.

`EvidenceState` is a plain value (the policy takes one and returns the next); `EvidenceStore` reads
and writes it as JSON through a small key/value interface (`KeyValue`) that `MemoryStore` and
`RedisStore` both provide. Writes are last-writer-wins: the probe leases keep two replicas from
deciding the same (probe, endpoint) at once, and a lost update only delays a decision by a round.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

# Evidence of an endpoint nobody probes any more is dropped after this long.
EVIDENCE_TTL_SECONDS = 90 * 86_400.0


@dataclass(frozen=True, slots=True)
class EvidenceState:
    # e-CUSUM statistic per probe: M = e * max(1, M), starting at 0 (no evidence yet).
    cusum: Mapping[str, float] = field(default_factory=dict)
    # Consecutive rounds with every result passing (counts toward leaving DEMOTED).
    clean_rounds: int = 0
    # The probes whose alarms made the endpoint suspect: what the confirmatory round re-runs.
    suspects: tuple[str, ...] = ()
    # The same e-CUSUM on the endpoint's own grounds alone (probes.base.Grounds): a window that fails
    # against the reference only steps it as a passing window would. A run that one chance failure
    # started and reference failures carried fades here, so it never counts as independent evidence.
    own: Mapping[str, float] = field(default_factory=dict)
    # Until then (wall seconds) a reference-only alarm asks for no confirmatory round (HealthSettings.reference_hold_seconds).
    held_until: float = 0.0
    # Availability evidence: upstream errors seen while probing (never quality evidence).
    errors: int = 0
    last_error: str = ""
    updated: float = 0.0
    # Fields a newer version wrote that this one does not know: written back as they were, so a
    # replica of the old version in a rolling deploy does not erase them (reset() drops them).
    unknown: Mapping[str, Any] = field(default_factory=dict)

    def grounded(self, probe: str) -> bool:
        """Whether the probe's own-grounds run is under way (holds failures not yet washed out)."""
        return self.own.get(probe, 0.0) > 1.0

    @property
    def peak(self) -> float:
        return max(self.cusum.values(), default=0.0)

    def reset(self) -> EvidenceState:
        """Forget the quality evidence (after a confirmatory pass, or on entering probation)."""
        return replace(self, cusum={}, own={}, clean_rounds=0, suspects=(), held_until=0.0, unknown={})

    def to_json(self) -> str:
        return json.dumps(
            {
                **self.unknown,
                "cusum": dict(self.cusum),
                "clean_rounds": self.clean_rounds,
                "suspects": list(self.suspects),
                "own": dict(self.own),
                "held_until": self.held_until,
                "errors": self.errors,
                "last_error": self.last_error,
                "updated": self.updated,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, raw: str | bytes) -> EvidenceState:
        data: dict[str, Any] = json.loads(raw)
        return cls(
            cusum={str(k): float(v) for k, v in (data.get("cusum") or {}).items()},
            clean_rounds=int(data.get("clean_rounds", 0)),
            suspects=tuple(str(s) for s in data.get("suspects") or ()),
            # A state stored before "own" existed starts its own-grounds runs afresh.
            own={str(k): float(v) for k, v in (data.get("own") or {}).items()},
            held_until=float(data.get("held_until", 0.0)),
            errors=int(data.get("errors", 0)),
            last_error=str(data.get("last_error", "")),
            updated=float(data.get("updated", 0.0)),
            unknown={k: v for k, v in data.items() if k not in _KNOWN},
        )


_KNOWN = frozenset(("cusum", "clean_rounds", "suspects", "own", "held_until", "errors", "last_error", "updated"))


class KeyValue(Protocol):
    """The slice of the state store that evidence needs (memory and Redis provide it)."""

    async def kv_get(self, key: str) -> bytes | None: ...

    async def kv_put(self, key: str, value: bytes, ttl_s: float) -> None: ...


class EvidenceStore:
    def __init__(self, kv: KeyValue, *, prefix: str = "probe:evidence:") -> None:
        self._kv = kv
        self._prefix = prefix

    async def get(self, endpoint_id: str) -> EvidenceState:
        raw = await self._kv.kv_get(self._prefix + endpoint_id)
        return EvidenceState() if raw is None else EvidenceState.from_json(raw)

    async def put(self, endpoint_id: str, evidence: EvidenceState) -> None:
        await self._kv.kv_put(self._prefix + endpoint_id, evidence.to_json().encode(), EVIDENCE_TTL_SECONDS)
