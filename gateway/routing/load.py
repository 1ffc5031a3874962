"""Work in flight per endpoint: requests and prompt tokens still to prefill, this replica's own
(counted as attempts start, commit and end) plus the other replicas' (pulled by the sync loop)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class Load:
    __slots__ = ("inflight_here", "prefill_here", "remote")

    def __init__(self) -> None:
        self.inflight_here: dict[str, int] = {}
        self.prefill_here: dict[str, int] = {}
        # endpoint id -> (in flight, prefill tokens) on the other replicas.
        self.remote: Mapping[str, tuple[int, int]] = {}

    def inflight(self, endpoint_id: str) -> int:
        remote = self.remote.get(endpoint_id)
        return self.inflight_here.get(endpoint_id, 0) + (remote[0] if remote else 0)

    def pending_prefill(self, endpoint_id: str) -> int:
        remote = self.remote.get(endpoint_id)
        return self.prefill_here.get(endpoint_id, 0) + (remote[1] if remote else 0)

    def started(self, endpoint_id: str, prefill_tokens: int) -> None:
        self.inflight_here[endpoint_id] = self.inflight_here.get(endpoint_id, 0) + 1
        self.prefill_here[endpoint_id] = self.prefill_here.get(endpoint_id, 0) + prefill_tokens

    def prefilled(self, endpoint_id: str, prefill_tokens: int) -> None:
        self.prefill_here[endpoint_id] = max(0, self.prefill_here.get(endpoint_id, 0) - prefill_tokens)

    def ended(self, endpoint_id: str) -> int:
        """One request fewer; returns how many are left here."""
        left = self.inflight_here[endpoint_id] = max(0, self.inflight_here.get(endpoint_id, 0) - 1)
        return left

    def own(self, endpoint_ids: Iterable[str]) -> dict[str, tuple[int, int]]:
        """This replica's counts, as it reports them to the store."""
        return {e: (self.inflight_here.get(e, 0), self.prefill_here.get(e, 0)) for e in endpoint_ids}
