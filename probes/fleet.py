"""Fleet-level false discovery control: with dozens of endpoints audited every day, the demotions
of one audit round (a UTC day by default) are gated by e-BH (`probes.stats.ebh`) at
`probes.fleet.alpha` over every endpoint's e-value of that round.

An endpoint's e-value for the round is the product of the e-values of its results in the rounds
whose data are fresh by design: on-demand audits and confirmatory rounds (scheduled windows are
left out, or an honest endpoint's hourly passes would shrink it). Each factor is valid given the
past (its round was decided on before its data were drawn), so the product is a test
supermartingale and its value when a demotion is proposed is an e-value (Ville). A result's
e-value is its own-grounds p-value through the calibrator kappa * p^(kappa - 1); a comparison with
the reference alone carries none (e = 1): another correct engine fails it.

A proposed demotion happens when e-BH over the round's proposed demotions (others at e = 0, which
keeps the rejected set self-consistent) with n = the fleet's size rejects the endpoint. Hard rules
(effect "demote", e.g. confirmed truncation) are not statistical and pass ungated. Each decision is
e-BH over the set as it stands then; earlier demotions of the round are not revisited.

The round's figures live in the shared state store (one JSON value per round, last writer wins,
like `probes.evidence`), so every replica gates on the same numbers and the admin API reports them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from probes.base import ProbeResult
from probes.evidence import KeyValue
from probes.settings import FleetSettings
from probes.stats.ebh import EBH, ebh
from probes.stats.evalues import calibrate

# Past this an e-value decides any fleet (n / (alpha * k) < 1e12 for any real fleet); keeps JSON finite.
E_CAP = 1e12


def result_e(r: ProbeResult, kappa: float) -> float:
    """The e-value of one result against "this endpoint is honest", whichever engine serves it."""
    if r.verdict not in ("pass", "fail"):
        return 1.0
    details = r.details or {}
    # A probe that also compares with the reference names the p-value of its own-grounds test.
    p = details.get("self_p_value") if "self_p_value" in details else r.p_value if r.grounds == "self" else None
    if not isinstance(p, int | float) or math.isnan(p):
        return 1.0
    return min(E_CAP, calibrate(min(1.0, max(0.0, float(p))), kappa))


def audit_e(results: Iterable[ProbeResult], kappa: float) -> float:
    e = 1.0
    for r in results:
        e = min(E_CAP, e * result_e(r, kappa))
    return e


@dataclass(frozen=True, slots=True)
class Gate:
    allowed: bool
    e_value: float
    ebh: EBH

    def describe(self) -> str:
        verb = "admits it" if self.allowed else "holds it back"
        return (
            f"the fleet's e-BH at FDR {self.ebh.alpha:g} over {self.ebh.n} endpoints {verb}: e = {self.e_value:.3g}"
            f" {'>=' if self.allowed else '<'} {self.ebh.threshold:.3g}"
        )


class FleetLedger:
    def __init__(
        self, kv: KeyValue, settings: FleetSettings, fleet_size: Callable[[], int], *, prefix: str = "probe:fleet:"
    ) -> None:
        self._kv = kv
        self.settings = settings
        self._fleet_size = fleet_size
        self._prefix = prefix

    def round_of(self, now: float) -> int:
        return int(now // self.settings.round_seconds)

    async def _load(self, now: float) -> dict[str, Any]:
        raw = await self._kv.kv_get(f"{self._prefix}{self.round_of(now)}")
        data: dict[str, Any] = json.loads(raw) if raw else {}
        return {
            "e": dict(data.get("e") or {}),
            "proposed": list(data.get("proposed") or []),
            "demoted": list(data.get("demoted") or []),
            "held": list(data.get("held") or []),
        }

    async def _save(self, now: float, data: Mapping[str, Any]) -> None:
        key = f"{self._prefix}{self.round_of(now)}"
        await self._kv.kv_put(key, json.dumps(data, sort_keys=True).encode(), 2 * self.settings.round_seconds)

    async def record(self, endpoint_id: str, results: Iterable[ProbeResult], *, now: float) -> float:
        """Multiply one fresh round's evidence into the endpoint's e-value of the round; returns it."""
        data = await self._load(now)
        e = min(E_CAP, float(data["e"].get(endpoint_id, 1.0)) * audit_e(results, self.settings.kappa))
        data["e"][endpoint_id] = e
        await self._save(now, data)
        return e

    def _ebh(self, data: Mapping[str, Any], proposed: Iterable[str]) -> EBH:
        candidates = {ep: float(data["e"].get(ep, 1.0)) for ep in proposed}
        n = max(self._fleet_size(), len(data["e"]), len(candidates))
        return ebh(candidates, self.settings.alpha, n)

    async def gate(self, endpoint_id: str, *, now: float) -> Gate:
        """Whether e-BH over this round's proposed demotions (this one included) rejects the endpoint."""
        data = await self._load(now)
        proposed = list(dict.fromkeys([*data["proposed"], endpoint_id]))
        result = self._ebh(data, proposed)
        allowed = endpoint_id in result.rejected
        data["proposed"] = proposed
        for name in ("demoted", "held"):
            data[name] = [ep for ep in data[name] if ep != endpoint_id]
        data["demoted" if allowed else "held"].append(endpoint_id)
        await self._save(now, data)
        return Gate(allowed, float(data["e"].get(endpoint_id, 1.0)), result)

    async def snapshot(self, *, now: float) -> dict[str, Any]:
        """The round's figures for the admin API and the dashboard."""
        data = await self._load(now)
        result = self._ebh(data, data["proposed"])
        start = self.round_of(now) * self.settings.round_seconds
        return {
            "object": "probe.fleet",
            "round": self.round_of(now),
            "round_start": start,
            "round_seconds": self.settings.round_seconds,
            "alpha": self.settings.alpha,
            "method": "e-BH",
            "n": result.n,
            "k": result.k,
            "threshold": result.threshold,
            "demoted": len(data["demoted"]),
            "held": len(data["held"]),
            "endpoints": sorted(
                (
                    {
                        "endpoint": ep,
                        "e_value": e,
                        "proposed": ep in data["proposed"],
                        "demoted": ep in data["demoted"],
                        "held": ep in data["held"],
                    }
                    for ep, e in data["e"].items()
                ),
                key=lambda row: (-row["e_value"], row["endpoint"]),
            ),
        }
