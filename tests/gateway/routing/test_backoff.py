"""Retry delays: exponential backoff with jitter, Retry-After honoured or refused."""

from __future__ import annotations

import random

import pytest

from gateway.routing.backoff import retry_delay
from gateway.routing.settings import RetryConfig

CFG = RetryConfig(backoff_base=0.1, backoff_max=2.0, max_retry_after=5.0)


@pytest.mark.parametrize("attempt", [0, 1, 2, 3, 4, 5, 10])
def test_jitter_bounds(attempt: int) -> None:
    rng = random.Random(1234)
    base = min(CFG.backoff_max, CFG.backoff_base * 2**attempt)
    delays = [retry_delay(attempt, None, CFG, rng) for _ in range(500)]
    assert all(d is not None and base / 2 <= d <= base for d in delays)
    assert max(delays) - min(delays) > base / 4  # really jittered, not constant


def test_grows_exponentially_then_caps() -> None:
    class Fixed(random.Random):
        def random(self) -> float:
            return 1.0

    rng = Fixed()
    assert [retry_delay(a, None, CFG, rng) for a in range(7)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0])


def test_seeded_rng_is_reproducible() -> None:
    first = [retry_delay(1, None, CFG, random.Random(7)) for _ in range(3)]
    assert first == [retry_delay(1, None, CFG, random.Random(7)) for _ in range(3)]


def test_retry_after_is_honoured() -> None:
    assert retry_delay(0, 3.0, CFG, random.Random(0)) == 3.0
    assert retry_delay(0, CFG.max_retry_after, CFG, random.Random(0)) == CFG.max_retry_after


def test_short_retry_after_does_not_shorten_the_backoff() -> None:
    rng = random.Random(3)
    delay = retry_delay(4, 0.01, CFG, rng)
    assert delay is not None and delay >= 0.8


def test_too_long_retry_after_means_move_on() -> None:
    assert retry_delay(0, CFG.max_retry_after + 0.001, CFG, random.Random(0)) is None
    assert retry_delay(0, 3600, CFG, random.Random(0)) is None


def test_zero_base() -> None:
    cfg = RetryConfig(backoff_base=0, backoff_max=0)
    assert retry_delay(3, None, cfg, random.Random(0)) == 0
