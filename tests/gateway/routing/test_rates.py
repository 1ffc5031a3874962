"""RateCounts: the shared view plus unpushed deltas decide a deployment's headroom; a key's local
window decides while the store is away."""

from __future__ import annotations

from gateway.routing.rates import MAX_RATE_DELTA, RateCounts
from tests.gateway.routing.helpers import endpoint


def test_headroom_counts_the_shared_view_and_the_pending_deltas() -> None:
    limited, free = endpoint("lim", routing={"rpm": 3, "tpm": 1000}), endpoint("free")
    rates = RateCounts([limited, free])
    assert list(rates.limited) == ["dep:lim"]
    rates.view = {"dep:lim": (1, 500)}
    assert rates.headroom(limited, 400)
    rates.add_deployment("lim", 1, 100)
    assert not rates.headroom(limited, 401)  # 500 shared + 100 pending + 401 > 1000
    rates.add_deployment("lim", 1, 0)
    assert not rates.headroom(limited, 0)  # 1 + 2 requests: a fourth is over 3 rpm
    rates.add_deployment("free", 1, 10**6)
    assert rates.headroom(free, 10**9) and "dep:free" not in rates.pending  # no limit: not counted


def test_a_failed_push_puts_the_deltas_back_and_they_stay_bounded() -> None:
    rates = RateCounts([])
    rates.add("key:a", 1, 10)
    taken = rates.take()
    assert taken == {"key:a": [1, 10]} and rates.pending == {}
    rates.add("key:a", 1, 5)
    rates.restore(taken)
    assert rates.pending == {"key:a": [2, 15]}
    for _ in range(3):
        rates.add("key:a", 0, MAX_RATE_DELTA)
    assert rates.pending["key:a"][1] == MAX_RATE_DELTA


def test_a_local_admission_is_counted_for_the_store_when_allowed() -> None:
    rates = RateCounts([])
    assert rates.acquire_locally("key:a", 10.0, 60.0, 1, None, 7).allowed
    refused = rates.acquire_locally("key:a", 10.5, 60.0, 1, None, 7)
    assert not refused.allowed and refused.retry_after > 0
    assert rates.pending == {"key:a": [1, 7]}  # the refused one is not replayed
