"""Load: this replica's in-flight counts and prefill tokens plus the other replicas'."""

from __future__ import annotations

from gateway.routing.load import Load


def test_own_and_remote_work_add_up() -> None:
    load = Load()
    load.started("a", 100)
    load.started("a", 50)
    load.remote = {"a": (3, 1000), "b": (1, 10)}
    assert (load.inflight("a"), load.pending_prefill("a")) == (5, 1150)
    assert (load.inflight("b"), load.pending_prefill("b")) == (1, 10)
    load.prefilled("a", 100)
    assert load.ended("a") == 1
    assert load.own(["a", "b"]) == {"a": (1, 50), "b": (0, 0)}  # what is reported: its own only


def test_counts_never_go_below_zero() -> None:
    load = Load()
    assert load.ended("a") == 0
    load.prefilled("a", 10)
    assert (load.inflight("a"), load.pending_prefill("a")) == (0, 0)
