"""Rate-limit counts: the store's shared usage of each deployment and key (pulled by the sync
loop), this replica's deltas not yet pushed, and local windows that decide a key's admission
while the store is away."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gateway.catalog import Endpoint
from gateway.state_store.base import RateResult, rate_key
from gateway.state_store.window import SlidingWindow

# A pending rate count stays well inside every store's integer range (Redis: below 1e17).
MAX_RATE_DELTA = 10**15


def bounded(n: int) -> int:
    return max(-MAX_RATE_DELTA, min(MAX_RATE_DELTA, n))


class RateCounts:
    def __init__(self, endpoints: Iterable[Endpoint]) -> None:
        # The deployments with an RPM or TPM limit, by rate key.
        self.limited = {
            rate_key("dep", ep.id): ep for ep in endpoints if ep.deployment.routing.rpm or ep.deployment.routing.tpm
        }
        self.view: Mapping[str, tuple[int, int]] = {}
        self.pending: dict[str, list[int]] = {}
        self._local: dict[str, SlidingWindow] = {}
        self.dropped = 0  # deltas the store refused as values, never retried

    def headroom(self, endpoint: Endpoint, tokens: int) -> bool:
        r = endpoint.deployment.routing
        if r.rpm is None and r.tpm is None:
            return True
        key = rate_key("dep", endpoint.id)
        requests, used = self.view.get(key, (0, 0))
        pending = self.pending.get(key)
        if pending:
            requests, used = requests + pending[0], used + pending[1]
        return (r.rpm is None or requests + 1 <= r.rpm) and (r.tpm is None or used + tokens <= r.tpm)

    def add(self, key: str, requests: int, tokens: int) -> None:
        pending = self.pending.setdefault(key, [0, 0])
        pending[0] = bounded(pending[0] + requests)
        pending[1] = bounded(pending[1] + tokens)

    def add_deployment(self, endpoint_id: str, requests: int, tokens: int) -> None:
        """Counted only for deployments with a limit."""
        key = rate_key("dep", endpoint_id)
        if key in self.limited and (requests or tokens):
            self.add(key, requests, tokens)

    def acquire_locally(
        self, key: str, now: float, window_s: float, rpm: int | None, tpm: int | None, tokens: int
    ) -> RateResult:
        """A key's admission on this replica's own window (replayed into the store when it returns)."""
        result = self._local.setdefault(key, SlidingWindow()).acquire(now, window_s, rpm, tpm, tokens)
        if result.allowed:
            self.add(key, 1, tokens)
        return result

    def take(self) -> dict[str, list[int]]:
        """The pending deltas, to push (`restore` puts them back if the push fails)."""
        rates, self.pending = self.pending, {}
        return rates

    def restore(self, rates: Mapping[str, list[int]]) -> None:
        for key, (requests, tokens) in rates.items():
            self.add(key, requests, tokens)
