"""Tests that need a service (Redis, PostgreSQL, a redis-server binary) skip on a developer's
machine without it, and fail under CI (``CI=true``, set by .ci/run), where scripts/test.sh has
provided everything: a CI run must not go green by skipping what it was meant to test."""

from __future__ import annotations

import os

import pytest


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require(available: bool, reason: str) -> None:
    """Skip (or, under CI, fail) the calling test or fixture when the service is missing."""
    if available:
        return
    if under_ci():
        pytest.fail(f"{reason}; under CI (CI=true) a missing service fails the run", pytrace=False)
    pytest.skip(reason)
