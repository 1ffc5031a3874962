"""The capability rules shared by the resolve stage and the routing filters."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.catalog import Catalog
from gateway.pipeline.resolve import resolve
from gateway.routing import capabilities
from gateway.routing.filters import check_capabilities
from kernel.deployment import Capabilities
from kernel.errors import UnsupportedParameter
from tests.gateway.routing.helpers import chat, endpoint, features


def test_what_a_body_needs() -> None:
    assert capabilities.requested("chat", chat()) == (frozenset(), 0)
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert capabilities.requested("chat", chat(tools=tools)) == (frozenset({"tools"}), 0)
    assert capabilities.requested("chat", chat(tools=tools, tool_choice="none")) == (frozenset(), 0)
    assert capabilities.requested("chat", chat(logprobs=True, top_logprobs=5)) == (frozenset({"logprobs"}), 5)
    assert capabilities.requested("chat", chat(logprobs=False, top_logprobs=5)) == (frozenset(), 0)
    # A completion's `logprobs` is its number of top logprobs; 0 still asks for logprobs.
    assert capabilities.requested("completions", {"prompt": "x", "logprobs": 0}) == (frozenset({"logprobs"}), 0)
    assert capabilities.requested("completions", {"prompt": "x", "logprobs": 3}) == (frozenset({"logprobs"}), 3)
    assert capabilities.requested("embeddings", {"input": "x", "logprobs": 3}) == (frozenset(), 0)


def test_the_first_unmet_rule_names_the_reason() -> None:
    none = Capabilities(tools=False, logprobs=False, max_top_logprobs=2)
    assert capabilities.unmet(none, {"tools", "logprobs"}, 5) == ("tools", "does not support tools")
    assert capabilities.unmet(none, {"logprobs"}, 5) == ("logprobs", "does not return logprobs")
    some = Capabilities(max_top_logprobs=2)
    assert capabilities.unmet(some, {"logprobs"}, 5) == ("top_logprobs", "returns at most 2 top logprobs, 5 asked")
    assert capabilities.unmet(some, {"logprobs"}, 2) is None
    fanned = Capabilities(native_n=False, max_fanout_n=4)
    assert [reason for reason, rule in capabilities.rules(set(), 0, 5) if rule(fanned)] == ["n"]
    assert not [reason for reason, rule in capabilities.rules(set(), 0, 4) if rule(fanned)]


@pytest.mark.parametrize(
    ("caps", "body", "reason", "param"),
    [
        ({"tools": False}, chat(tools=[{"type": "function", "function": {"name": "f"}}]), "tools", "tools"),
        ({"logprobs": False}, chat(logprobs=True), "logprobs", "logprobs"),
        ({"max_top_logprobs": 3}, chat(logprobs=True, top_logprobs=4), "top_logprobs", "top_logprobs"),
    ],
)
def test_resolve_and_the_filters_rule_alike(
    caps: dict[str, Any], body: dict[str, Any], reason: str, param: str
) -> None:
    lacking, able = endpoint("lacking", capabilities=caps), endpoint("able")
    catalog = Catalog([lacking, able], created=0)
    assert resolve(catalog, "chat", "m", body) == (able,)
    f = features(body)
    ruled = check_capabilities(lacking, f, None)  # type: ignore[arg-type]  # no snapshot needed
    assert ruled is not None and ruled[0] == reason
    assert check_capabilities(able, f, None) is None  # type: ignore[arg-type]
    with pytest.raises(UnsupportedParameter) as err:
        resolve(Catalog([lacking], created=0), "chat", "m", body)
    assert err.value.param == param
