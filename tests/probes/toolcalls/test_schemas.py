"""Hostile schemas against `compile_schema`: nothing is fetched or opened, patterns run in linear
time, oversized and unsatisfiable schemas and keywords no grammar enforces are "unchecked"."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from probes.toolcalls.schemas import SchemaLimits, compile_schema
from probes.toolcalls.validator import SchemaCache, ToolSpec, classify_response

LIMITS = SchemaLimits()


def obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


def compiled(schema: Any, *, client: bool = True) -> Any:
    return compile_schema(schema, LIMITS, client=client)


def classes(schema: Any, arguments: str) -> list[str]:
    request = {"tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}]}
    call = {"type": "function", "function": {"name": "f", "arguments": arguments}}
    resp = {"choices": [{"message": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]}
    report = classify_response(resp, ToolSpec.from_request(request), SchemaCache(client=True))
    return list(report.choices[0].calls)


@pytest.fixture
def silent_listener() -> Iterator[tuple[socket.socket, int]]:
    """A socket that listens and never answers (it never even accepts)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    try:
        yield sock, sock.getsockname()[1]
    finally:
        sock.close()


class Audit:
    """Records `open` and `socket.connect` audit events for the paths and ports it watches."""

    def __init__(self) -> None:
        self.paths: set[str] = set()
        self.ports: set[int] = set()
        self.seen: list[tuple[str, Any]] = []
        sys.addaudithook(self._hook)  # hooks cannot be removed; this one only looks at its own targets

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open" and args and str(args[0]) in self.paths:
            self.seen.append((event, args[0]))
        elif event == "socket.connect" and len(args) > 1 and isinstance(args[1], tuple) and args[1][1:2] and args[1][1] in self.ports:
            self.seen.append((event, args[1]))


@pytest.fixture(scope="module")
def audit() -> Audit:
    return Audit()


def hostile_refs(port: int, canary: Path) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/schema.json"
    return [
        {"$ref": url},
        obj(city={"$ref": url}),
        obj(city={"$ref": f"{url}#/definitions/city"}),
        {"$id": f"http://127.0.0.1:{port}/", **obj(city={"$ref": "city.json"})},
        {"$schema": "https://json-schema.org/draft/2020-12/schema", **obj(city={"$dynamicRef": url})},
        {"allOf": [{"$ref": f"file://{canary}"}]},
        obj(city={"$ref": "file:///dev/zero"}),
        {"$ref": f"https://127.0.0.1:{port}/x"},
        obj(a={"anyOf": [{"type": "string"}, {"$ref": f"//127.0.0.1:{port}/y"}]}),
    ]


def test_refs_outside_the_schema_are_never_fetched_or_opened(
    silent_listener: tuple[socket.socket, int], audit: Audit, tmp_path: Path
) -> None:
    sock, port = silent_listener
    canary = tmp_path / "canary.json"
    canary.write_text('{"type": "string"}')
    audit.paths.update({str(canary), "/dev/zero"})
    audit.ports.add(port)
    started = time.perf_counter()
    for schema in hostile_refs(port, canary):
        result = compiled(schema, client=False)  # not even the trusted path fetches
        assert result.validator is None and result.unchecked, schema
        assert classes(schema, '{"city": "Paris", "a": 1}') == ["unchecked"], schema
    took = time.perf_counter() - started
    assert audit.seen == []
    with pytest.raises(BlockingIOError):
        sock.accept()  # no connection ever reached the socket
    assert took < 5.0  # nothing waited on the socket (a fetch would hang until killed)


def test_local_refs_still_check(audit: Audit) -> None:
    schema = {"$defs": {"city": {"type": "string", "minLength": 2}}, **obj(city={"$ref": "#/$defs/city"}), "required": ["city"]}
    assert classes(schema, '{"city": "Paris"}') == ["ok"]
    assert classes(schema, '{"city": "P"}') == ["schema_mismatch"]
    assert classes(schema, "{}") == ["schema_mismatch"]


REDOS = "^(a+)+$"
EVIL = "a" * 5000 + "!"  # Python's re backtracks on this for longer than the age of the universe


def time_check(pattern: str, value: str, repeat: int = 5) -> tuple[list[str], float]:
    schema = obj(s={"type": "string", "pattern": pattern})
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        out = classes(schema, f'{{"s": "{value}"}}')
        best = min(best, time.perf_counter() - started)
    return out, best


def test_a_redos_pattern_runs_in_linear_time() -> None:
    # The same check with a pattern that cannot backtrack is the baseline for this machine's speed;
    # bench/schema_safety.py prints the figures (the target is < 50 ms).
    baseline_out, baseline = time_check("^[a-z]+$", EVIL)
    out, took = time_check(REDOS, EVIL)
    assert baseline_out == out == ["schema_mismatch"]
    assert took < max(0.05, 20 * baseline), (took, baseline)
    assert classes(obj(s={"type": "string", "pattern": REDOS}), '{"s": "aaaa"}') == ["ok"]


def test_patterns_re2_cannot_run_make_the_schema_unchecked() -> None:
    for pattern in (r"^(a)\1$", r"^(?=a)a$", r"^(?<!b)a$"):
        assert compiled(obj(s={"type": "string", "pattern": pattern})).unchecked == "a pattern RE2 cannot run"
    keys = {"patternProperties": {r"^(x)\1$": {"type": "string"}}, "type": "object"}
    assert compiled(keys, client=False).unchecked is not None


def test_pattern_properties_use_re2_on_the_trusted_path() -> None:
    schema = {"type": "object", "patternProperties": {"^(a+)+$": {"type": "integer"}}}
    validator = compiled(schema, client=False).validator
    assert validator is not None
    started = time.perf_counter()
    assert not validator.is_valid({"a" * 5000: "x"}) and validator.is_valid({"b": "x"})
    assert time.perf_counter() - started < 5.0


def big_schema(target_bytes: int) -> dict[str, Any]:
    props = {f"p{i:06d}": {"type": "string", "description": "x" * 40} for i in range(target_bytes // 70)}
    return {"type": "object", "properties": props}


def test_size_and_depth_caps() -> None:
    huge = big_schema(1_200_000)  # the audit's 1.2 MB schema cost 1.3 s of CPU on the loop
    started = time.perf_counter()
    result = compiled(huge)
    assert result.unchecked is not None and "bytes" in result.unchecked
    assert time.perf_counter() - started < 1.0  # measured, never compiled
    assert compiled(big_schema(30_000)).validator is not None
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(40):
        deep = obj(a=deep)
    assert compiled(deep).unchecked == "nested too deep"
    assert compile_schema(deep, SchemaLimits(max_depth=100), client=True).validator is not None


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "not": {}},
        False,
        {"type": "object", "allOf": [False]},
        {"type": "object", "enum": []},
        {"type": []},
        {"type": "string"},  # arguments are always an object
        {"allOf": [{"type": "object"}, {"type": "array"}]},
        {"anyOf": [False, {"not": True}]},
        obj(n={"type": "integer", "minimum": 5, "maximum": 1}) | {"required": ["n"]},
        obj(s={"type": "string", "minLength": 3, "maxLength": 2}) | {"required": ["s"]},
        obj(s={"type": "string", "enum": [1, 2]}) | {"required": ["s"]},
        obj(s={"type": "integer", "const": "x"}) | {"required": ["s"]},
        {"type": "object", "properties": {}, "additionalProperties": False, "required": ["x"]},
        {"$defs": {"never": {"enum": []}}, **obj(x={"$ref": "#/$defs/never"}), "required": ["x"]},
        obj(xs={"type": "array", "items": False, "minItems": 1}) | {"required": ["xs"]},
    ],
)
def test_unsatisfiable_client_schemas_are_unchecked(schema: Any) -> None:
    result = compiled(schema)
    assert result.validator is None and result.unchecked is not None, schema


@pytest.mark.parametrize(
    "keyword, value",
    [
        ("not", {"required": ["x"]}),
        ("oneOf", [{"required": ["a"]}, {"required": ["b"]}]),
        ("if", {"required": ["a"]}),
        ("dependentRequired", {"a": ["b"]}),
        ("minProperties", 2),
        ("propertyNames", {"maxLength": 3}),
    ],
)
def test_keywords_no_grammar_enforces_make_a_client_schema_unchecked(keyword: str, value: Any) -> None:
    schema = {"type": "object", keyword: value}
    assert "constrained decoding" in (compiled(schema).unchecked or "")
    assert compiled(schema, client=False).validator is not None  # the gateway's own suite may use them


def test_ordinary_satisfiable_schemas_are_checked() -> None:
    schema = obj(
        city={"type": "string", "minLength": 1},
        unit={"enum": ["c", "f"]},
        days={"type": "integer", "minimum": 1, "maximum": 14},
        tags={"type": "array", "items": {"type": "string"}, "maxItems": 3},
        where={"anyOf": [{"type": "string"}, {"type": "null"}]},
    ) | {"required": ["city"], "additionalProperties": False}
    assert compiled(schema).validator is not None
    assert classes(schema, '{"city": "Oslo", "days": 3, "tags": ["a"]}') == ["ok"]
    assert classes(schema, '{"city": "Oslo", "days": 30}') == ["schema_mismatch"]


def test_recursive_local_refs_do_not_crash() -> None:
    loop = {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "string"}]}}, **obj(x={"$ref": "#/$defs/a"})}
    assert classes(loop, '{"x": 1}') == ["unchecked"]  # endless recursion in jsonschema: not the endpoint's fault
