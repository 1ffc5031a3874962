"""Resolve: keep the endpoints that support the operation and every capability the body uses."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.pipeline.resolve import resolve
from kernel.errors import ModelNotFound, UnsupportedParameter
from tests.fakes.catalog import make_catalog, make_endpoint

TOOLS = [{"type": "function", "function": {"name": "f"}}]
MSGS = [{"role": "user", "content": "hi"}]

CATALOG = make_catalog(
    make_endpoint("full/m", "m"),
    make_endpoint("notools/m", "m", capabilities={"tools": False}),
    make_endpoint("fewlp/m", "m", capabilities={"max_top_logprobs": 2}),
    make_endpoint("nolp/m", "m", capabilities={"logprobs": False, "max_top_logprobs": 0}),
    make_endpoint("a/no-tools", "no-tools", capabilities={"tools": False}),
    make_endpoint("a/few-lp", "few-lp", capabilities={"max_top_logprobs": 2}),
    make_endpoint("b/few-lp", "few-lp", capabilities={"max_top_logprobs": 5}),
    make_endpoint("a/no-lp", "no-lp", capabilities={"logprobs": False}),
    make_endpoint("a/chat-only", "chat-only", capabilities={"modes": ["chat"]}),
    make_endpoint("a/embed", "embed", capabilities={"modes": ["embeddings"]}),
)


def ids(op: str, model: str, body: dict[str, Any]) -> list[str]:
    return [ep.id for ep in resolve(CATALOG, op, model, body)]  # type: ignore[arg-type]


def unsupported(op: str, model: str, body: dict[str, Any]) -> UnsupportedParameter:
    with pytest.raises(UnsupportedParameter) as info:
        resolve(CATALOG, op, model, body)  # type: ignore[arg-type]
    assert info.value.code == "unsupported_parameter" and info.value.status_code == 400
    return info.value


def test_plain_request_keeps_every_candidate_in_order() -> None:
    assert ids("chat", "m", {"messages": MSGS}) == ["full/m", "notools/m", "fewlp/m", "nolp/m"]


def test_filters_by_capability() -> None:
    assert ids("chat", "m", {"tools": TOOLS}) == ["full/m", "fewlp/m", "nolp/m"]
    assert ids("chat", "m", {"logprobs": True}) == ["full/m", "notools/m", "fewlp/m"]
    assert ids("chat", "m", {"logprobs": True, "top_logprobs": 5}) == ["full/m", "notools/m"]
    assert ids("chat", "m", {"tools": TOOLS, "logprobs": True, "top_logprobs": 5}) == ["full/m"]
    assert ids("completions", "m", {"logprobs": 2}) == ["full/m", "notools/m", "fewlp/m"]
    assert ids("completions", "m", {"logprobs": 3}) == ["full/m", "notools/m"]


def test_tool_choice_none_needs_no_tool_support() -> None:
    assert ids("chat", "no-tools", {"tools": TOOLS, "tool_choice": "none"}) == ["a/no-tools"]


def test_logprobs_false_needs_nothing() -> None:
    assert ids("chat", "no-lp", {"logprobs": False, "top_logprobs": 5}) == ["a/no-lp"]


def test_tools_on_a_no_tools_deployment() -> None:
    err = unsupported("chat", "no-tools", {"tools": TOOLS})
    assert err.param == "tools"
    assert "no-tools" in err.message


def test_top_logprobs_above_every_max() -> None:
    assert ids("chat", "few-lp", {"logprobs": True, "top_logprobs": 5}) == ["b/few-lp"]
    assert unsupported("chat", "few-lp", {"logprobs": True, "top_logprobs": 6}).param == "top_logprobs"


def test_completions_logprobs_above_every_max() -> None:
    assert unsupported("completions", "few-lp", {"logprobs": 6}).param == "logprobs"


def test_logprobs_on_a_deployment_without_them() -> None:
    assert unsupported("chat", "no-lp", {"logprobs": True}).param == "logprobs"
    assert unsupported("completions", "no-lp", {"logprobs": 0}).param == "logprobs"


def test_operation_not_supported_by_any_deployment() -> None:
    err = unsupported("embeddings", "chat-only", {"input": "x"})
    assert err.param == "model"
    assert "embeddings" in err.message
    assert unsupported("chat", "embed", {"messages": MSGS}).param == "model"
    assert ids("embeddings", "embed", {"input": "x"}) == ["a/embed"]


def test_unknown_model() -> None:
    with pytest.raises(ModelNotFound) as info:
        resolve(CATALOG, "chat", "nope", {})
    assert info.value.param == "model" and info.value.status_code == 404


N_CATALOG = make_catalog(
    make_endpoint("native/mixed", "mixed"),
    make_endpoint("fanout/mixed", "mixed", capabilities={"native_n": False}),
    make_endpoint("a/fanout", "fanout", capabilities={"native_n": False}),
    make_endpoint("b/fanout", "fanout", capabilities={"native_n": False, "max_fanout_n": 16}),
)


def n_ids(model: str, n: int, op: str = "chat") -> list[str]:
    return [ep.id for ep in resolve(N_CATALOG, op, model, {"n": n})]  # type: ignore[arg-type]


def test_n_past_the_fan_out_limit_keeps_only_endpoints_that_can_serve_it() -> None:
    assert n_ids("fanout", 8) == ["a/fanout", "b/fanout"]  # the default limit is 8
    assert n_ids("fanout", 9) == ["b/fanout"]
    assert n_ids("mixed", 128) == ["native/mixed"]  # native `n` has no fan-out limit
    assert n_ids("mixed", 1) == ["native/mixed", "fanout/mixed"]


def test_n_past_every_limit_is_a_400_naming_n_and_the_limit() -> None:
    with pytest.raises(UnsupportedParameter) as info:
        resolve(N_CATALOG, "chat", "fanout", {"n": 128})
    assert info.value.status_code == 400 and info.value.param == "n"
    assert "128" in info.value.message and "limit of 16" in info.value.message
    with pytest.raises(UnsupportedParameter):
        resolve(N_CATALOG, "completions", "fanout", {"n": 17})
