"""The fixed, versioned tool-call suite (`cases_v<N>.json`, written once by `make_cases`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SUITE_VERSION = 1
TEMPERATURE = 0.0
SEED = 7


@dataclass(frozen=True, slots=True)
class ExpectedCall:
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    kind: str  # single, parallel, nested, open, no_call
    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[Mapping[str, Any]]
    tool_choice: Any
    max_tokens: int
    expect_call: bool
    # The exact calls on deterministic cases (order free), else None.
    expected: tuple[ExpectedCall, ...] | None = None
    parallel: bool = False

    @property
    def deterministic(self) -> bool:
        return self.expected is not None

    def request(self) -> dict[str, Any]:
        """The chat request body (the client fills in `model`): greedy and seeded, so an honest
        endpoint answers the same way every run."""
        body: dict[str, Any] = {
            "messages": [dict(m) for m in self.messages],
            "tools": [dict(t) for t in self.tools],
            "tool_choice": self.tool_choice,
            "max_tokens": self.max_tokens,
            "temperature": TEMPERATURE,
            "seed": SEED,
        }
        if self.parallel:
            body["parallel_tool_calls"] = True
        return body

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Case:
        expect = data["expect"]
        calls = expect.get("calls")
        return cls(
            id=data["id"],
            kind=data["kind"],
            messages=tuple(data["messages"]),
            tools=tuple(data["tools"]),
            tool_choice=data["tool_choice"],
            max_tokens=int(data["max_tokens"]),
            expect_call=bool(expect["call"]),
            expected=None if calls is None else tuple(ExpectedCall(c["name"], c["arguments"]) for c in calls),
            parallel=bool(data.get("parallel_tool_calls")),
        )


@dataclass(frozen=True, slots=True)
class Suite:
    version: int
    cases: tuple[Case, ...]

    def sample(self, n: int | None, rng: np.random.Generator) -> tuple[Case, ...]:
        """`n` distinct cases in suite order (all when n is None or covers the suite)."""
        if n is None or n >= len(self.cases):
            return self.cases
        picked = sorted(rng.choice(len(self.cases), size=n, replace=False).tolist())
        return tuple(self.cases[i] for i in picked)


def suite_path(version: int = SUITE_VERSION) -> Path:
    return Path(__file__).with_name(f"cases_v{version}.json")


def load_suite(version: int = SUITE_VERSION, path: Path | None = None) -> Suite:
    data = json.loads((path or suite_path(version)).read_text())
    if data["version"] != version:
        raise ValueError(f"{path}: suite version {data['version']}, expected {version}")
    return Suite(version, tuple(Case.from_json(c) for c in data["cases"]))
