"""Bounded-load rendezvous hashing."""

from __future__ import annotations

from collections import Counter

from gateway.routing.hashring import bounded_home, rendezvous_order

EPS = [f"local-{i}" for i in range(4)]


def test_order_is_a_function_of_key_and_set() -> None:
    assert rendezvous_order(42, EPS) == rendezvous_order(42, list(reversed(EPS)))
    assert sorted(rendezvous_order(42, EPS)) == sorted(EPS)


def test_removing_an_endpoint_moves_only_its_keys() -> None:
    before = {k: rendezvous_order(k, EPS)[0] for k in range(2000)}
    after = {k: rendezvous_order(k, EPS[:3])[0] for k in range(2000)}
    moved = [k for k in before if before[k] != after[k]]
    assert all(before[k] == "local-3" for k in moved)


def test_keys_spread_evenly() -> None:
    counts = Counter(rendezvous_order(k, EPS)[0] for k in range(4000))
    assert all(800 < n < 1200 for n in counts.values()), counts


def test_home_spills_when_loaded() -> None:
    first = rendezvous_order(7, EPS)
    assert bounded_home(7, EPS, lambda e: 0.0, 1.25) == first[0]
    loads = {first[0]: 5.0}
    assert bounded_home(7, EPS, lambda e: loads.get(e, 0.0), 1.25) == first[1]
    assert bounded_home(7, [], lambda e: 0.0, 1.25) is None
