"""Hidden checks for rate_limiter.py."""


def _clock(now=100.0):
    """(a namespace the test moves by setting `.now`, the clock to inject, a setter for `driver.calls`).
    It lives in the solution's process (`driver` is the judge's link to it): what the solution gets
    is a partial of the builtin getattr that reads the namespace."""
    return driver.clock(now)  # noqa: F821 - the judge puts `driver` into the checks' namespace


def _close(a, b):
    return abs(a - b) < 1e-9


def smoke(m):
    _, now, set_now = _clock()
    bucket = m.TokenBucket(5.0, 10.0, now)
    calls = []
    for i in range(10000):
        calls += [(set_now, (100.0 + 0.01 * (i + 1),)), (bucket.allow, (1.0 + (i % 3),))]
    driver.calls(calls)  # noqa: F821 - from the judge: one request for them all


def behaviour_limits(m):
    bucket = m.TokenBucket(1.0, 3.0, _clock()[1])
    got = [bucket.allow() for _ in range(5)]
    assert got == [True, True, True, False, False], got


def behaviour_refills(m):
    clock, now, _ = _clock()
    bucket = m.TokenBucket(2.0, 3.0, now)
    for _ in range(3):
        bucket.allow()
    clock.now += 1.0
    got = [bucket.allow() for _ in range(3)]
    assert got == [True, True, False], f"after 1 s at 2 tokens/s: {got}"


def behaviour_caps_at_capacity(m):
    clock, now, _ = _clock()
    bucket = m.TokenBucket(1.0, 2.0, now)
    clock.now += 1000.0
    got = [bucket.allow() for _ in range(3)]
    assert got == [True, True, False], got


def test_starts_full(m):
    assert _close(m.TokenBucket(1.0, 4.0, _clock()[1]).available(), 4.0)


def test_fractional_refill(m):
    clock, now, _ = _clock()
    bucket = m.TokenBucket(4.0, 10.0, now)
    assert bucket.allow(10.0)
    clock.now += 0.125
    assert _close(bucket.available(), 0.5), bucket.available()
    assert not bucket.allow(1.0)
    clock.now += 0.125
    assert bucket.allow(1.0) and _close(bucket.available(), 0.0)


def test_denial_keeps_tokens(m):
    bucket = m.TokenBucket(1.0, 5.0, _clock()[1])
    assert not bucket.allow(6.0)
    assert _close(bucket.available(), 5.0) and bucket.allow(5.0)


def test_cost(m):
    bucket = m.TokenBucket(1.0, 5.0, _clock()[1])
    assert bucket.allow(2.5) and bucket.allow(2.5) and not bucket.allow(0.5)


def test_validation(m):
    clock, now, _ = _clock()
    for args in ((0.0, 1.0), (-1.0, 1.0), (1.0, 0.0), (1.0, -2.0)):
        try:
            m.TokenBucket(args[0], args[1], now)
        except ValueError:
            continue
        raise AssertionError(f"TokenBucket{args} was accepted")
    bucket = m.TokenBucket(1.0, 1.0, now)
    for cost in (0.0, -1.0):
        try:
            bucket.allow(cost)
        except ValueError:
            continue
        raise AssertionError(f"allow({cost}) was accepted")


def test_uses_injected_clock(m):
    clock, now, _ = _clock(now=5.0)
    bucket = m.TokenBucket(1.0, 1.0, now)
    assert bucket.allow()
    assert not bucket.allow()  # the injected clock has not moved, whatever the real time does
    clock.now = 6.0
    assert bucket.allow()
