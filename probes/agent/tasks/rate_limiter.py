"""A token-bucket rate limiter with an injected clock."""

from __future__ import annotations

from probes.agent.tasks.base import Task

PROMPT = """\
Write `rate_limiter.py` (standard library only) with a class TokenBucket:

TokenBucket(rate, capacity, clock): rate is tokens added per second (> 0), capacity the most
tokens the bucket holds (> 0); raise ValueError otherwise. clock is a function with no arguments
returning the current time in seconds as a float; always use it, never the real time. The bucket
starts full (capacity tokens) at the time clock() returns when it is created.

available() -> float: first refill, then return the current number of tokens.
allow(cost=1.0) -> bool: first refill; then if at least `cost` tokens are available, remove
  them and return True, else return False and remove nothing. cost must be > 0 (else ValueError).

Refill: tokens = min(capacity, tokens + (now - last) * rate), then last = now, where now is
clock() and last the time of the previous refill (or of creation).
"""

RATE_LIMITER = Task(name="rate_limiter", filename="rate_limiter.py", prompt=PROMPT)
