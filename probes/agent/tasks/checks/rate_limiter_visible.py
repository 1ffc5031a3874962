"""Public checks for rate_limiter.py."""


def test_allows_up_to_capacity(m):
    bucket = m.TokenBucket(1.0, 2.0, lambda: 0.0)
    assert bucket.allow() and bucket.allow() and not bucket.allow()
