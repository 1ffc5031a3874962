"""The committed suite: its size and mix, its expected calls valid against their own schemas, and
the generator reproducing it byte for byte."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from probes.toolcalls import make_cases
from probes.toolcalls.cases import load_suite, suite_path
from probes.toolcalls.validator import SchemaCache, ToolSpec, classify_response
from tests.probes.toolcalls.fakes import call_response


def test_suite_size_and_mix() -> None:
    suite = load_suite()
    cases = suite.cases
    assert suite.version == 1 and len(cases) >= 100
    assert len({c.id for c in cases}) == len(cases)
    assert sum(c.deterministic for c in cases) * 2 >= len(cases)  # half or more have exact expected calls
    kinds = Counter(c.kind for c in cases)
    assert set(kinds) == {"single", "parallel", "nested", "open", "no_call"}
    assert sum(not c.expect_call for c in cases) >= 10
    assert {"none", "required", "auto"} <= {c.tool_choice for c in cases if isinstance(c.tool_choice, str)}
    assert any(isinstance(c.tool_choice, dict) for c in cases)
    assert all(c.max_tokens <= 128 for c in cases)  # tiny local models answer quickly
    assert all(len(c.expected or ()) == 2 for c in cases if c.kind == "parallel")


def test_expected_calls_validate_against_their_schemas() -> None:
    schemas = SchemaCache()
    for case in load_suite().cases:
        if case.expected is None:
            continue
        resp = call_response([(c.name, dict(c.arguments)) for c in case.expected])
        report = classify_response(resp, ToolSpec.from_request(case.request()), schemas)
        assert not report.bad, case.id


def test_every_tool_requires_an_argument_so_a_dropped_one_is_visible() -> None:
    for case in load_suite().cases:
        for tool in case.tools:
            assert tool["function"]["parameters"]["required"], tool["function"]["name"]


def test_requests_are_greedy_and_seeded() -> None:
    case = load_suite().cases[0]
    body = case.request()
    assert body["temperature"] == 0.0 and isinstance(body["seed"], int)
    assert "model" not in body and body["tools"] and body["max_tokens"] == case.max_tokens


def test_sampling_is_seeded_and_distinct() -> None:
    suite = load_suite()
    a = suite.sample(30, np.random.default_rng(5))
    b = suite.sample(30, np.random.default_rng(5))
    assert [c.id for c in a] == [c.id for c in b] and len({c.id for c in a}) == 30
    assert suite.sample(None, np.random.default_rng(5)) == suite.cases


def test_generator_reproduces_the_committed_json(tmp_path: Path) -> None:
    out = tmp_path / "cases.json"
    make_cases.main(["--out", str(out)])
    assert out.read_text() == suite_path().read_text()
    assert json.loads(out.read_text())["version"] == make_cases.VERSION
