from __future__ import annotations

from pathlib import Path

import pytest

from probes.agent.sandbox import SubprocessSandbox

SOLUTIONS = Path(__file__).with_name("solutions")


def solution(name: str) -> str:
    return (SOLUTIONS / f"{name}_good.py").read_text()


def mutate(source: str, *edits: tuple[str, str]) -> str:
    """The known-good source with each (old, new) edit applied; every `old` must be there."""
    for old, new in edits:
        assert old in source, f"mutation target not found: {old!r}"
        source = source.replace(old, new)
    return source


@pytest.fixture(scope="session")
def sandbox() -> SubprocessSandbox:
    return SubprocessSandbox()
