"""Bounded-load consistent hashing (rendezvous flavour), for cold misses.

Every gateway replica ranks the candidates by ``xxh3_64(endpoint id, seed=key)`` and takes the
first whose load is within `bound` times the mean (at least one request of slack), so replicas
that share no index still send a new prefix family to the same endpoint, and a hot family spills
over to the next one in its own order instead of piling up (CHWBL, Mirrokni et al. 2018).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import xxhash

_hash = xxhash.xxh3_64_intdigest


def rendezvous_order(key: int, endpoint_ids: Sequence[str]) -> list[str]:
    seed = key & 0xFFFFFFFFFFFFFFFF
    return sorted(endpoint_ids, key=lambda e: _hash(e.encode(), seed), reverse=True)


def bounded_home(key: int, endpoint_ids: Sequence[str], load: Callable[[str], float], bound: float) -> str | None:
    """The first endpoint in the key's order whose load stays within the bound; None if none do."""
    if not endpoint_ids:
        return None
    loads = {e: load(e) for e in endpoint_ids}
    mean = sum(loads.values()) / len(loads)
    # After placing this request, the home may carry at most bound * mean (with one request of slack).
    cap = max(bound * (mean + 1.0 / len(loads)), 1.0)
    for endpoint_id in rendezvous_order(key, endpoint_ids):
        if loads[endpoint_id] + 1.0 <= cap + 1e-9:
            return endpoint_id
    return None
