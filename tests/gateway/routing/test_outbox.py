"""Outbox: breaker changes coalesce per endpoint, affinity entries keep their order, and a failed
push puts back what is not newer."""

from __future__ import annotations

from gateway.routing.outbox import Outbox


def test_the_latest_open_or_close_wins_and_the_longest_block_stands() -> None:
    box = Outbox("r1")
    box.breaker_changed("a", 30.0, 5.0, now=100.0)
    box.breaker_changed("a", None, 1.0, now=110.0)  # no open/close news: still open, 20 s left
    assert box.breaker["a"] == (20.0, 1.0, 110.0)
    box.breaker_changed("a", 0.0, 0.0, now=111.0)  # closed
    assert box.breaker["a"] == (0.0, 0.0, 111.0)
    box.breaker_changed("b", None, 10.0, now=0.0)
    box.breaker_changed("b", None, 2.0, now=1.0)  # the first block has 9 s left: it stands
    assert box.breaker["b"] == (None, 9.0, 1.0)


def test_an_open_that_ran_out_is_no_news() -> None:
    box = Outbox("r1")
    box.breaker_changed("a", 5.0, 0.0, now=100.0)
    box.breaker_changed("a", None, 0.0, now=200.0)
    assert box.breaker["a"][0] is None


def test_a_failed_push_is_restored_without_overwriting_newer_changes() -> None:
    box = Outbox("r1", max_affinity=10)
    box.learned("a", [1, 2])
    box.breaker_changed("a", 30.0, 0.0, now=100.0)
    breaker, affinity = box.take()
    assert box.breaker == {} and not box.affinity
    assert [(e.replica, e.endpoint, e.op, e.blocks) for e in affinity] == [("r1", "a", "insert", (1, 2))]
    box.learned("b", [3])
    box.breaker_changed("a", 0.0, 0.0, now=101.0)  # newer than the one being restored
    box.restore(breaker, affinity)
    assert box.breaker["a"][0] == 0.0
    assert [e.endpoint for e in box.affinity] == ["a", "b"]  # the older entries first
