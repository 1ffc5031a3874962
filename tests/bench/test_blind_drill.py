"""bench/blind_drill.py's pure parts: the blind assignment of kinds to neutral names, and the tables."""

from __future__ import annotations

from typing import Any

from bench.blind_drill import FAULTY, HONEST, assign, by_class, confusion


def test_assignment_is_a_seeded_shuffle_under_names_that_say_nothing() -> None:
    kinds = HONEST + FAULTY
    a, b, c = assign(kinds, 0), assign(kinds, 0), assign(kinds, 1)
    assert [e.kind for e in a] == [e.kind for e in b]
    assert [e.kind for e in a] != [e.kind for e in c]
    assert sorted(e.kind.label for e in a) == sorted(k.label for k in kinds)
    assert [e.name for e in a] == [f"ep-{i:02d}" for i in range(1, len(kinds) + 1)] == [e.name for e in c]


def row(kind: str, honest: bool, state: str, failed: list[str], seconds: float = 10.0) -> dict[str, Any]:
    return {"kind": kind, "honest": honest, "state": state, "failed": failed, "seconds": seconds}


def test_tables_count_states_and_failing_probes() -> None:
    rows = [
        row("h", True, "healthy", []),
        row("h", True, "suspect", ["logprob_drift"]),
        row("f", False, "demoted", ["fidelity", "fidelity (confirm)"]),
        row("f", False, "probation", []),
    ]
    table = confusion(rows).splitlines()
    assert table[2] == "| honest | 1 | 1 | 0 | 0 |"
    assert table[3] == "| faulty | 0 | 0 | 1 | 1 |"
    classes = by_class(rows).splitlines()
    assert "| h | 2 | 1 / 1 / 0 | logprob_drift (1) | 10, 10 |" in classes
    assert "| f | 2 | 0 / 0 / 1 | fidelity (1), fidelity (confirm) (1) | 10, 10 |" in classes
