"""A missing service skips its tests on a developer's machine and fails them under CI."""

from __future__ import annotations

import pytest

from tests.services import require


def test_a_missing_service_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="PostgreSQL is not answering"):
        require(False, "PostgreSQL is not answering")
    require(True, "never said")


@pytest.mark.parametrize("value", ["true", "1", "TRUE"])
def test_a_missing_service_fails_under_ci(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="Redis is not answering.*fails the run"):
        require(False, "Redis is not answering")
    require(True, "never said")
