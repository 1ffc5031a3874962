"""Every filter reason code, asserted on the candidate it rules out (and only that one)."""

from __future__ import annotations

import pytest

from gateway.catalog import Endpoint
from gateway.routing.decision import (
    HARD_REASONS,
    NOT_READY,
    REASONS,
    SOFT_REASONS,
    Filtered,
)
from gateway.routing.features import RequestFeatures
from gateway.routing.filters import (
    CHECKS,
    active_checks,
    apply_filters,
    check_plain,
    check_preferences,
    check_region,
)
from gateway.routing.settings import KeyPolicy
from gateway.routing.snapshot import StaticSnapshot
from tests.gateway.routing.helpers import chat, endpoint, features

OK = endpoint("ok/m")


def reason_for(ep: Endpoint, f: RequestFeatures, snapshot: StaticSnapshot | None = None) -> Filtered:
    """Filter [ok, ep]: ok is kept, ep is filtered; return ep's record."""
    snapshot = snapshot or StaticSnapshot(endpoints=(OK, ep))
    kept, filtered = apply_filters([OK, ep], f, snapshot)
    assert kept == [OK]
    assert [x.endpoint for x in filtered] == [ep]
    return filtered[0]


def test_mode() -> None:
    ep = endpoint("embed/m", capabilities={"modes": ["embeddings"]})
    assert reason_for(ep, features()).reason == "mode"


def test_tools() -> None:
    body = chat(tools=[{"type": "function", "function": {"name": "f"}}])
    assert reason_for(endpoint("notools/m", capabilities={"tools": False}), features(body)).reason == "tools"


def test_tools_not_needed_when_tool_choice_is_none() -> None:
    body = chat(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="none")
    kept, filtered = apply_filters([endpoint("notools/m", capabilities={"tools": False})], features(body), StaticSnapshot())
    assert kept and not filtered


def test_logprobs() -> None:
    ep = endpoint("nolp/m", capabilities={"logprobs": False})
    assert reason_for(ep, features(chat(logprobs=True))).reason == "logprobs"


def test_top_logprobs() -> None:
    ep = endpoint("few/m", capabilities={"max_top_logprobs": 2})
    record = reason_for(ep, features(chat(logprobs=True, top_logprobs=5)))
    assert record.reason == "top_logprobs" and "at most 2" in record.detail
    kept, _ = apply_filters([ep], features(chat(logprobs=True, top_logprobs=2)), StaticSnapshot())
    assert kept == [ep]


def test_completions_logprobs() -> None:
    ep = endpoint("few/m", capabilities={"max_top_logprobs": 1})
    f = features({"model": "m", "prompt": "x", "logprobs": 3}, op="completions")
    assert reason_for(ep, f).reason == "top_logprobs"


def test_context_window_estimated() -> None:
    ok = endpoint("big/m", context_window=100_000)
    small = endpoint("small/m", context_window=1000)
    f = features(chat("word " * 2000))  # ~2.5k estimated tokens
    kept, filtered = apply_filters([ok, small], f, StaticSnapshot())
    assert kept == [ok] and filtered[0].reason == "context_window" and "estimated" in filtered[0].detail


def test_context_window_counts_output_and_says_counted() -> None:
    ep = endpoint("w/m", context_window=1000)
    f = features(chat("hi", max_tokens=900), exact=150)
    record = reason_for(ep, f)
    assert record.reason == "context_window" and "150 prompt tokens (counted) + 900 output > window 1000" in record.detail
    kept, _ = apply_filters([ep], features(chat("hi", max_tokens=800), exact=150), StaticSnapshot())
    assert kept == [ep]


def test_region_from_the_key() -> None:
    ep = endpoint("eu/m", region="eu")
    record = reason_for(ep, features(key_policy=KeyPolicy(regions=("us",))))
    assert record.reason == "region" and "key" in record.detail


def test_region_from_the_request() -> None:
    ep = endpoint("us2/m", region="us-west")
    record = reason_for(ep, features(chat(provider={"region": ["us"]})))
    assert record.reason == "region" and "requested" in record.detail


def test_data_policy_from_the_key() -> None:
    ep = endpoint("keeps/m", keeps_prompts=True)
    record = reason_for(ep, features(key_policy=KeyPolicy(data_collection="deny")))
    assert record.reason == "data_policy" and "key" in record.detail


def test_data_policy_from_the_request() -> None:
    ep = endpoint("keeps/m", keeps_prompts=True)
    record = reason_for(ep, features(chat(provider={"data_collection": "deny"})))
    assert record.reason == "data_policy" and "request" in record.detail


def test_preference_only_matches_provider_or_endpoint_id() -> None:
    ep = endpoint("other/m")
    assert reason_for(ep, features(chat(provider={"only": ["ok"]}))).reason == "pref_only"
    assert reason_for(ep, features(chat(provider={"only": ["OK/M"]}))).reason == "pref_only"


def test_preference_ignore() -> None:
    assert reason_for(endpoint("bad/m"), features(chat(provider={"ignore": ["bad"]}))).reason == "pref_ignored"


def test_preference_order_without_fallbacks() -> None:
    f = features(chat(provider={"order": ["ok"], "allow_fallbacks": False}))
    assert reason_for(endpoint("unlisted/m"), f).reason == "pref_order"
    # With fallbacks allowed, unlisted endpoints stay (after the listed ones).
    kept, _ = apply_filters([OK, endpoint("unlisted/m")], features(chat(provider={"order": ["ok"]})), StaticSnapshot())
    assert len(kept) == 2


@pytest.mark.parametrize(
    ("price", "pref", "detail"),
    [
        ({"input": 2.0}, {"prompt": 1.0}, "prompt price"),
        ({"output": 3.0}, {"completion": 1.0}, "completion price"),
        ({"input": 10.0, "output": 10.0}, {"request": 0.001}, "expected request cost"),
    ],
)
def test_max_price(price: dict[str, float], pref: dict[str, float], detail: str) -> None:
    record = reason_for(endpoint("pricey/m", price=price), features(chat(provider={"max_price": pref})))
    assert record.reason == "max_price" and detail in record.detail


def test_require_parameters() -> None:
    ep = endpoint("noseed/m", routing={"unsupported_params": ["seed"]})
    record = reason_for(ep, features(chat(seed=1, provider={"require_parameters": True})))
    assert record.reason == "require_parameters" and "seed" in record.detail
    # Without require_parameters the endpoint stays (it ignores the parameter).
    kept, _ = apply_filters([ep], features(chat(seed=1)), StaticSnapshot())
    assert kept == [ep]


def test_not_ready() -> None:
    ep = endpoint("starting/m", ready=lambda: False)
    assert reason_for(ep, features(), StaticSnapshot(not_ready=frozenset({"starting/m"}))).reason == NOT_READY


def test_health_demoted() -> None:
    ep = endpoint("sick/m")
    snap = StaticSnapshot(health_states={"sick/m": "demoted", "ok/m": "suspect"})
    assert reason_for(ep, features(), snap).reason == "health_demoted"


@pytest.mark.parametrize("reason", ["breaker_open", "retry_after"])
def test_breaker(reason: str) -> None:
    ep = endpoint("tripped/m")
    assert reason_for(ep, features(), StaticSnapshot(blocks={"tripped/m": reason})).reason == reason


def test_rate_limited() -> None:
    ep = endpoint("busy/m", routing={"rpm": 10})
    assert reason_for(ep, features(), StaticSnapshot(no_headroom=frozenset({"busy/m"}))).reason == "rate_limited"
    # Deployments without limits never consult the headroom.
    unlimited = endpoint("free/m")
    kept, _ = apply_filters([unlimited], features(), StaticSnapshot(no_headroom=frozenset({"free/m"})))
    assert kept == [unlimited]


def test_first_failing_check_names_the_reason() -> None:
    ep = endpoint("both/m", region="eu", capabilities={"tools": False})
    body = chat(tools=[{"type": "function", "function": {"name": "f"}}], provider={"region": "us"})
    snap = StaticSnapshot(blocks={"both/m": "breaker_open"})
    _, filtered = apply_filters([ep], features(body), snap)
    assert filtered[0].reason == "tools"


def test_checks_that_cannot_apply_are_skipped() -> None:
    plain = active_checks(features())
    assert check_region not in plain and check_preferences not in plain
    assert check_region in active_checks(features(chat(provider={"region": "us"})))
    assert check_preferences in active_checks(features(chat(provider={"sort": "price"})))
    assert len(CHECKS) == 9
    assert active_checks(features()) == (check_plain,)


def test_reason_codes_are_partitioned() -> None:
    assert HARD_REASONS.isdisjoint(SOFT_REASONS) and NOT_READY not in HARD_REASONS | SOFT_REASONS


TOOLS = [{"type": "function", "function": {"name": "f"}}]
# (endpoint, request features, snapshot, the reason it must get): one case per reason code.
CASES: list[tuple[Endpoint, RequestFeatures, StaticSnapshot | None, str]] = [
    (endpoint("e/m", capabilities={"modes": ["embeddings"]}), features(), None, "mode"),
    (endpoint("e/m", capabilities={"tools": False}), features(chat(tools=TOOLS)), None, "tools"),
    (endpoint("e/m", capabilities={"logprobs": False}), features(chat(logprobs=True)), None, "logprobs"),
    (endpoint("e/m", capabilities={"max_top_logprobs": 1}), features(chat(logprobs=True, top_logprobs=3)), None, "top_logprobs"),
    (endpoint("e/m", context_window=100), features(chat(), exact=200), None, "context_window"),
    (endpoint("e/m", region="eu"), features(key_policy=KeyPolicy(regions=("us",))), None, "region"),
    (endpoint("e/m", keeps_prompts=True), features(chat(provider={"data_collection": "deny"})), None, "data_policy"),
    (endpoint("e/m"), features(chat(provider={"only": ["ok"]})), None, "pref_only"),
    (endpoint("e/m"), features(chat(provider={"ignore": ["e"]})), None, "pref_ignored"),
    (endpoint("e/m"), features(chat(provider={"order": ["ok"], "allow_fallbacks": False})), None, "pref_order"),
    (endpoint("e/m", price={"input": 5}), features(chat(provider={"max_price": {"prompt": 1}})), None, "max_price"),
    (
        endpoint("e/m", routing={"unsupported_params": ["seed"]}),
        features(chat(seed=3, provider={"require_parameters": True})),
        None,
        "require_parameters",
    ),
    (endpoint("e/m"), features(), StaticSnapshot(not_ready=frozenset({"e/m"})), NOT_READY),
    (endpoint("e/m"), features(), StaticSnapshot(health_states={"e/m": "demoted"}), "health_demoted"),
    (endpoint("e/m"), features(), StaticSnapshot(blocks={"e/m": "breaker_open"}), "breaker_open"),
    (endpoint("e/m"), features(), StaticSnapshot(blocks={"e/m": "retry_after"}), "retry_after"),
    (endpoint("e/m", routing={"tpm": 5}), features(), StaticSnapshot(no_headroom=frozenset({"e/m"})), "rate_limited"),
]


@pytest.mark.parametrize(("ep", "f", "snapshot", "reason"), CASES, ids=[c[3] for c in CASES])
def test_each_reason(ep: Endpoint, f: RequestFeatures, snapshot: StaticSnapshot | None, reason: str) -> None:
    assert reason_for(ep, f, snapshot).reason == reason


def test_the_cases_cover_every_reason_code() -> None:
    assert {c[3] for c in CASES} == REASONS
