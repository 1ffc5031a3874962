"""The `provider` preferences object: accepted shapes, and a 400 naming each unknown or
contradictory field (checked once, when the request context accepts the body, and against the catalog when routed)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.pipeline.context import RequestContext
from gateway.pipeline.validate import validate
from gateway.routing.preferences import NO_PREFERENCES, check_names, parse
from kernel.errors import InvalidRequest


def test_absent_is_no_preferences() -> None:
    assert parse(None) is NO_PREFERENCES


def test_full_object() -> None:
    prefs = parse(
        {
            "order": ["Together", "local"],
            "allow_fallbacks": False,
            "only": ["together", "local", "deepinfra"],
            "ignore": ["groq"],
            "max_price": {"prompt": 0.2, "completion": 1, "request": 0.01},
            "require_parameters": True,
            "data_collection": "deny",
            "region": ["EU", "us"],
        }
    )
    assert prefs.order == ("together", "local")
    assert prefs.only == frozenset({"together", "local", "deepinfra"}) and prefs.ignore == frozenset({"groq"})
    assert (prefs.max_prompt, prefs.max_completion, prefs.max_request) == (0.2, 1.0, 0.01)
    assert not prefs.allow_fallbacks and prefs.require_parameters and prefs.data_collection == "deny"
    assert prefs.regions == frozenset({"eu", "us"})
    assert parse({"sort": "throughput", "region": "eu"}).sort == "throughput"


def fails(raw: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        parse(raw)
    assert info.value.status_code == 400
    return info.value


@pytest.mark.parametrize(
    ("raw", "param", "words"),
    [
        ({"speed": "fast"}, "provider.speed", "Unknown field 'provider.speed'"),
        ({"quantizations": ["fp8"]}, "provider.quantizations", "not supported by this gateway"),
        ({"max_price": {"tokens": 1}}, "provider.max_price.tokens", "Unknown field 'provider.max_price.tokens'"),
        ("together", "provider", "expected an object"),
        ({"order": "together"}, "provider.order", "array of provider names"),
        ({"only": [1]}, "provider.only", "array of provider names"),
        ({"sort": "cheapest"}, "provider.sort", "'price', 'latency' and 'throughput'"),
        ({"data_collection": "maybe"}, "provider.data_collection", "'allow' and 'deny'"),
        ({"allow_fallbacks": "no"}, "provider.allow_fallbacks", "expected a boolean"),
        ({"require_parameters": 1}, "provider.require_parameters", "expected a boolean"),
        ({"max_price": {"prompt": -1}}, "provider.max_price.prompt", "non-negative"),
        ({"max_price": 3}, "provider.max_price", "expected an object"),
        ({"region": []}, "provider.region", "region name"),
    ],
)
def test_bad_fields_are_named(raw: Any, param: str, words: str) -> None:
    err = fails(raw)
    assert err.param == param and words in err.message


@pytest.mark.parametrize(
    ("raw", "param", "words"),
    [
        ({"only": ["a"], "ignore": ["a"]}, "provider.ignore", "'a' is in both 'provider.only' and 'provider.ignore'"),
        ({"order": ["a"], "ignore": ["a"]}, "provider.order", "'a' is in both 'provider.order' and 'provider.ignore'"),
        ({"order": ["b"], "only": ["a"]}, "provider.order", "'b' is in 'provider.order' but not in 'provider.only'"),
        ({"order": ["a"], "sort": "price"}, "provider.sort", "both decide the order"),
        ({"only": []}, "provider.only", "no provider would be allowed"),
        ({"order": ["a", "A"]}, "provider.order", "listed twice"),
    ],
)
def test_contradictions_are_named(raw: Any, param: str, words: str) -> None:
    err = fails(raw)
    assert err.param == param and words in err.message


def test_names_are_checked_against_the_catalog() -> None:
    check_names(parse({"order": ["together"], "ignore": ["LOCAL-0"]}), ["together", "local-0"])
    with pytest.raises(InvalidRequest) as info:
        check_names(parse({"ignore": ["togehter"]}), ["together", "local-0"])
    assert info.value.param == "provider.ignore" and "Unknown provider 'togehter'" in info.value.message


def test_the_body_is_accepted_with_its_preferences_parsed_once() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "provider": {"sort": "price", "bogus": 1}}
    ctx = RequestContext(request_id="r", op="chat", started=0.0)
    with pytest.raises(InvalidRequest) as info:
        ctx.accept(validate("chat", body))
    assert info.value.param == "provider.bogus"
    body["provider"] = {"sort": "price"}
    ctx.accept(validate("chat", body))
    assert ctx.body is body and ctx.model == "m" and ctx.prefs.sort == "price"
    # A translation that parsed them already hands them over.
    ctx.accept(body, NO_PREFERENCES)
    assert ctx.prefs is NO_PREFERENCES
