"""Fleet-level false discovery control: with dozens of endpoints audited every day, the demotions
of one audit round (a UTC day by default) are gated by e-BH (`probes.stats.ebh`) at
`probes.fleet.alpha` over every endpoint's e-value of that round.

An endpoint's e-value for the round is the product of the e-values of its results in the rounds
whose data are fresh by design: on-demand audits and confirmatory rounds (scheduled windows are
left out, or an honest endpoint's hourly passes would shrink it). Each factor is valid given the
past (its round was decided on before its data were drawn), so the product is a test
supermartingale and its value when a demotion is proposed is an e-value (Ville). A result's
e-value is its own-grounds p-value through a calibrator (`probes.fleet.kappa`: kappa * p^(kappa - 1),
by default its mixture over kappa, `probes.stats.evalues.calibrate_mixture`), or a fixed share of
it (`fleet_weight` in its details; the rest stays 1) where a check's p-value is 1 on every honest
endpoint; a comparison with the reference alone carries none (e = 1): another correct engine fails it.
Results of one round read the same answers (the usage-consistency check reads the counts of the
requests drift, distribution and fidelity sent), so their product is an e-value only if, under the
null, each test's p-value stays valid given the others': the consistency check's null is count
noise independent of what the answers say, which the samplers' tests do not look at.

A proposed demotion happens only when the round's demoted set stays one that e-BH itself rejects
at `probes.fleet.alpha` with n = the fleet's size: with the endpoints already demoted this round
(D, each at its e-value when it was demoted), the new one needs e >= n / (alpha * (|D| + 1)), and
so does every member of D (they do, unless n grew since). An endpoint held back is not counted
(e = 0 in that e-BH): counting it would lower the next one's bar while it stays undemoted, and the
demoted set would no longer satisfy e_i >= n / (alpha * |D|) for each of its members, which is what
bounds the FDR (e-BH's self-consistency; `probes.stats.ebh`). A held endpoint gets its
confirmatory round, whose evidence multiplies in, and is gated again then; so does one whose round
cannot be read or locked (the runner's gate fails closed: an ungated demotion would escape the bound).
An endpoint is demoted or held in a round, never both. A demotion keeps the
e-value it was admitted with (the supermartingale stopped at that decision is an e-value): later
rounds on probation neither take it back nor raise the next one's bar. Hard rules (effect "demote",
e.g. confirmed truncation) are not statistical and pass ungated.

The round's figures live in the shared state store as one JSON value per round. Every change is
load -> modify -> save under the round's lease (one writer at a time across replicas; a unique
owner per update, released at once, expiring after `LOCK_TTL_S` if its holder dies), so two
replicas recording or gating at once lose no update. The store offers no compare-and-swap: a
holder stalled past the TTL (each store call times out within seconds) could still overwrite one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from gateway.state_store import StoreUnavailable
from probes.base import ProbeResult
from probes.evidence import KeyValue
from probes.settings import FleetSettings
from probes.stats.ebh import EBH, ebh, self_consistent
from probes.stats.evalues import calibrate

log = logging.getLogger("gateway.probes")
T = TypeVar("T")

# Past this an e-value decides any fleet (n / (alpha * k) < 1e12 for any real fleet); keeps JSON finite.
E_CAP = 1e12
# The round's lease: far longer than one update (two store calls, each bounded by the store's
# timeout); a writer waits up to LOCK_WAIT_S for it (a dead holder's lease has expired by then).
LOCK_TTL_S = 10.0
LOCK_WAIT_S = 2 * LOCK_TTL_S


class RoundStore(KeyValue, Protocol):
    """The slice of the state store the ledger needs: values with a TTL and leases."""

    async def lease_acquire(self, key: str, owner: str, ttl_s: float) -> bool: ...

    async def lease_release(self, key: str, owner: str) -> None: ...


def result_e(r: ProbeResult, kappa: float | None) -> float:
    """The e-value of one result against "this endpoint is honest", whichever engine serves it."""
    if r.verdict not in ("pass", "fail"):
        return 1.0
    details = r.details or {}
    # A probe that also compares with the reference names the p-value of its own-grounds test.
    p = details.get("self_p_value") if "self_p_value" in details else r.p_value if r.grounds == "self" else None
    if not isinstance(p, int | float) or math.isnan(p):
        return 1.0
    e = calibrate(min(1.0, max(0.0, float(p))), kappa)
    # A check may stake a share w of its e-value on its test, fixed before its data: (1 - w) + w * e
    # is an e-value too, and a pass at p = 1 costs 1 - w / 2 instead of 1 / 2 with the default
    # calibrator (1 - w (1 - kappa) instead of kappa with one kappa; probes.consistency).
    w = details.get("fleet_weight")
    if isinstance(w, int | float) and not isinstance(w, bool) and 0 <= w <= 1:
        e = (1 - w) + w * e if w > 0 else 1.0  # at p = 0, e is inf, and 0 * inf is NaN
    return min(E_CAP, e)


def audit_e(results: Iterable[ProbeResult], kappa: float | None) -> float:
    e = 1.0
    for r in results:
        e = min(E_CAP, e * result_e(r, kappa))
    return e


@dataclass(frozen=True, slots=True)
class Gate:
    allowed: bool
    e_value: float
    ebh: EBH  # over the round's demotions and this endpoint (held ones not counted)
    needed: float  # the bar this endpoint had to reach: n / (alpha * (demotions before it + 1))

    def describe(self) -> str:
        verb = "admits it" if self.allowed else "holds it back"
        return (
            f"the fleet's e-BH at FDR {self.ebh.alpha:g} over {self.ebh.n} endpoints {verb}: e = {self.e_value:.3g}"
            f" {'>=' if self.allowed else '<'} {self.needed:.3g}"
        )


class FleetLedger:
    def __init__(
        self, store: RoundStore, settings: FleetSettings, fleet_size: Callable[[], int], *, prefix: str = "probe:fleet:"
    ) -> None:
        self._kv = store
        self.settings = settings
        self._fleet_size = fleet_size
        self._prefix = prefix

    def round_of(self, now: float) -> int:
        return int(now // self.settings.round_seconds)

    async def _load(self, now: float) -> dict[str, Any]:
        raw = await self._kv.kv_get(f"{self._prefix}{self.round_of(now)}")
        data: dict[str, Any] = json.loads(raw) if raw else {}
        e = {str(k): float(v) for k, v in (data.get("e") or {}).items()}
        demoted = data.get("demoted") or {}
        if isinstance(demoted, list):  # written before demotions kept their e-value
            demoted = {ep: e.get(ep, 1.0) for ep in demoted}
        return {
            "e": e,
            "proposed": list(data.get("proposed") or []),
            "demoted": {str(k): float(v) for k, v in demoted.items()},
            "held": list(data.get("held") or []),
        }

    async def _save(self, now: float, data: Mapping[str, Any]) -> None:
        key = f"{self._prefix}{self.round_of(now)}"
        await self._kv.kv_put(key, json.dumps(data, sort_keys=True).encode(), 2 * self.settings.round_seconds)

    async def _update(self, now: float, change: Callable[[dict[str, Any]], T]) -> T:
        """`change` applied to the round's data and saved, under the round's lease."""
        key, owner = f"{self._prefix}lock:{self.round_of(now)}", uuid.uuid4().hex
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + LOCK_WAIT_S, 0.002
        while not await self._kv.lease_acquire(key, owner, LOCK_TTL_S):
            if loop.time() >= deadline:
                raise StoreUnavailable(f"the fleet's round {self.round_of(now)} stayed locked for {LOCK_WAIT_S:g} s")
            await asyncio.sleep(pause)
            pause = min(0.1, pause * 2)
        try:
            data = await self._load(now)
            out = change(data)
            await self._save(now, data)
            return out
        finally:
            try:
                await self._kv.lease_release(key, owner)
            except StoreUnavailable as exc:  # it expires after LOCK_TTL_S
                log.warning("probes: could not release the fleet's round lease: %s", exc)

    async def record(self, endpoint_id: str, results: Iterable[ProbeResult], *, now: float) -> float:
        """Multiply one fresh round's evidence into the endpoint's e-value of the round; returns it."""
        factor = audit_e(results, self.settings.kappa)

        def change(data: dict[str, Any]) -> float:
            e = min(E_CAP, float(data["e"].get(endpoint_id, 1.0)) * factor)
            data["e"][endpoint_id] = e
            return e

        return await self._update(now, change)

    def _n(self, data: Mapping[str, Any], extra: int = 0) -> int:
        return max(self._fleet_size(), len(data["e"]), len(data["demoted"]) + extra)

    async def gate(self, endpoint_id: str, *, now: float) -> Gate:
        """Whether the round's demotions with this one added are still a set e-BH rejects."""

        def change(data: dict[str, Any]) -> Gate:
            demoted: dict[str, float] = data["demoted"]
            e = float(data["e"].setdefault(endpoint_id, 1.0))
            again = endpoint_id in demoted
            candidates = demoted if again else {**demoted, endpoint_id: e}
            n = self._n(data, extra=1)
            allowed = self._admits(data, endpoint_id, e)
            # An endpoint is demoted or held, never both.
            data["proposed"] = list(dict.fromkeys([*data["proposed"], endpoint_id]))
            data["held"] = [ep for ep in data["held"] if ep != endpoint_id]
            if allowed:
                demoted.setdefault(endpoint_id, e)
            else:
                data["held"].append(endpoint_id)
            needed = n / (self.settings.alpha * len(candidates))
            return Gate(allowed, candidates.get(endpoint_id, e), ebh(candidates, self.settings.alpha, n), needed)

        return await self._update(now, change)

    async def would_admit(self, endpoint_id: str, results: Iterable[ProbeResult], *, now: float,
                          slack: float = 1.0) -> bool:
        """Whether `gate` would let this endpoint's demotion through once `results` are recorded,
        their e-value times `slack` (room for results still to come): a read, nothing changes."""
        data = await self._load(now)
        e = min(E_CAP, data["e"].get(endpoint_id, 1.0) * audit_e(results, self.settings.kappa) * slack)
        return self._admits(data, endpoint_id, e)

    def _admits(self, data: Mapping[str, Any], endpoint_id: str, e: float) -> bool:
        """e-BH over the round's demotions with this endpoint at `e` added. Already demoted this round
        (and back on probation): the rejection stands as admitted, even if n grew since."""
        demoted: dict[str, float] = data["demoted"]
        return endpoint_id in demoted or self_consistent({**demoted, endpoint_id: e}, self.settings.alpha,
                                                         self._n(data, extra=1))

    async def snapshot(self, *, now: float) -> dict[str, Any]:
        """The round's figures for the admin API and the dashboard."""
        data = await self._load(now)
        demoted: dict[str, float] = data["demoted"]
        n, k, alpha = self._n(data), len(demoted), self.settings.alpha
        start = self.round_of(now) * self.settings.round_seconds
        return {
            "object": "probe.fleet",
            "round": self.round_of(now),
            "round_start": start,
            "round_seconds": self.settings.round_seconds,
            "alpha": alpha,
            "method": "e-BH",
            "n": n,
            "k": k,
            "threshold": n / (alpha * max(1, k)),  # what the k-th demotion needed
            "next_threshold": max(n, k + 1) / (alpha * (k + 1)),  # what the next one needs
            "demoted": k,
            "held": len(data["held"]),
            "endpoints": sorted(
                (
                    {
                        "endpoint": ep,
                        "e_value": e,
                        "proposed": ep in data["proposed"],
                        "demoted": ep in demoted,
                        "demoted_e": demoted.get(ep),
                        "held": ep in data["held"],
                    }
                    for ep, e in data["e"].items()
                ),
                key=lambda row: (-row["e_value"], row["endpoint"]),
            ),
        }
