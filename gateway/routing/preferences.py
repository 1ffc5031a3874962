"""The request's `provider` object: OpenRouter-compatible routing preferences, plus `region`.

    {"provider": {"order": ["together", "local"], "allow_fallbacks": true, "only": [...],
                  "ignore": [...], "sort": "price" | "latency" | "throughput",
                  "max_price": {"prompt": 0.2, "completion": 0.6, "request": 0.01},
                  "require_parameters": false, "data_collection": "allow" | "deny",
                  "region": "eu" | ["eu", "us"]}}

`parse` checks the shape and raises a 400 naming the unknown or contradictory field; names in
`order`/`only`/`ignore` are checked against the catalog when the request is routed (`check_names`),
since only the router knows the catalog. Names match a provider name or an endpoint id, without
regard to case. Prices are USD per 1M tokens (prompt, completion) and USD per request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kernel.errors import InvalidRequest

Sort = Literal["price", "latency", "throughput"]

SUPPORTED = frozenset(
    {"order", "only", "ignore", "sort", "max_price", "allow_fallbacks", "require_parameters", "data_collection", "region"}
)
# OpenRouter fields this gateway does not implement: named as such rather than as unknown.
NOT_SUPPORTED = frozenset(
    {"quantizations", "zdr", "enforce_distillable_text", "preferred_min_throughput", "preferred_max_latency", "experimental"}
)
PRICE_FIELDS = frozenset({"prompt", "completion", "request"})


@dataclass(frozen=True, slots=True)
class ProviderPreferences:
    order: tuple[str, ...] = ()
    only: frozenset[str] | None = None
    ignore: frozenset[str] = frozenset()
    sort: Sort | None = None
    max_prompt: float | None = None
    max_completion: float | None = None
    max_request: float | None = None
    allow_fallbacks: bool = True
    require_parameters: bool = False
    data_collection: Literal["allow", "deny"] = "allow"
    regions: frozenset[str] | None = None


NO_PREFERENCES = ProviderPreferences()


def _fail(field: str, message: str) -> InvalidRequest:
    return InvalidRequest(message, param=f"provider.{field}" if field else "provider", code="invalid_provider_preferences")


def _names(raw: Mapping[str, Any], field: str) -> tuple[str, ...] | None:
    value = raw.get(field)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _fail(field, f"Invalid 'provider.{field}': expected an array of provider names.")
    return tuple(v.lower() for v in value)


def _bool(raw: Mapping[str, Any], field: str, default: bool) -> bool:
    value = raw.get(field)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _fail(field, f"Invalid type for 'provider.{field}': expected a boolean.")
    return value


def _max_price(raw: Mapping[str, Any]) -> dict[str, float]:
    value = raw.get("max_price")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail("max_price", "Invalid 'provider.max_price': expected an object such as {\"prompt\": 1.0, \"completion\": 2.0}.")
    unknown = sorted(set(value) - PRICE_FIELDS)
    if unknown:
        raise _fail(f"max_price.{unknown[0]}", f"Unknown field 'provider.max_price.{unknown[0]}'; supported: completion, prompt, request.")
    out = {}
    for name, price in value.items():
        if isinstance(price, bool) or not isinstance(price, (int, float)) or price < 0:
            raise _fail(f"max_price.{name}", f"Invalid 'provider.max_price.{name}': expected a non-negative number (USD).")
        out[name] = float(price)
    return out


def _regions(raw: Mapping[str, Any]) -> frozenset[str] | None:
    value = raw.get("region")
    if value is None:
        return None
    if isinstance(value, str) and value:
        return frozenset({value.lower()})
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return frozenset(v.lower() for v in value)
    raise _fail("region", "Invalid 'provider.region': expected a region name or a non-empty array of them.")


def parse(raw: Any) -> ProviderPreferences:
    """The validated preferences; `InvalidRequest` (400) names the first bad field."""
    if raw is None:
        return NO_PREFERENCES
    if not isinstance(raw, dict):
        raise _fail("", "Invalid type for 'provider': expected an object of routing preferences.")
    for field in raw:
        if field in NOT_SUPPORTED:
            raise _fail(field, f"'provider.{field}' is not supported by this gateway; supported: {', '.join(sorted(SUPPORTED))}.")
        if field not in SUPPORTED:
            raise _fail(field, f"Unknown field 'provider.{field}'; supported: {', '.join(sorted(SUPPORTED))}.")
    order = _names(raw, "order") or ()
    only = _names(raw, "only")
    ignore = _names(raw, "ignore") or ()
    sort = raw.get("sort")
    if sort is not None and sort not in ("price", "latency", "throughput"):
        raise _fail("sort", f"Invalid value for 'provider.sort': {sort!r}. Supported values are: 'price', 'latency' and 'throughput'.")
    data = raw.get("data_collection", "allow")
    if data not in ("allow", "deny"):
        raise _fail("data_collection", f"Invalid value for 'provider.data_collection': {data!r}. Supported values are: 'allow' and 'deny'.")
    prices = _max_price(raw)
    prefs = ProviderPreferences(
        order=order,
        only=frozenset(only) if only is not None else None,
        ignore=frozenset(ignore),
        sort=sort,
        max_prompt=prices.get("prompt"),
        max_completion=prices.get("completion"),
        max_request=prices.get("request"),
        allow_fallbacks=_bool(raw, "allow_fallbacks", True),
        require_parameters=_bool(raw, "require_parameters", False),
        data_collection=data,
        regions=_regions(raw),
    )
    _contradictions(prefs)
    return NO_PREFERENCES if prefs == NO_PREFERENCES else prefs


def _contradictions(p: ProviderPreferences) -> None:
    if p.only is not None and not p.only:
        raise _fail("only", "'provider.only' is empty: no provider would be allowed.")
    both = sorted(p.ignore & p.only) if p.only is not None else []
    if both:
        raise _fail("ignore", f"'{both[0]}' is in both 'provider.only' and 'provider.ignore'.")
    ignored = [name for name in p.order if name in p.ignore]
    if ignored:
        raise _fail("order", f"'{ignored[0]}' is in both 'provider.order' and 'provider.ignore'.")
    if p.only is not None:
        outside = [name for name in p.order if name not in p.only]
        if outside:
            raise _fail("order", f"'{outside[0]}' is in 'provider.order' but not in 'provider.only'.")
    if p.order and p.sort:
        raise _fail("sort", "'provider.order' and 'provider.sort' both decide the order; set one of them.")
    dup = next((name for i, name in enumerate(p.order) if name in p.order[:i]), None)
    if dup:
        raise _fail("order", f"'{dup}' is listed twice in 'provider.order'.")


def check_names(prefs: ProviderPreferences, known: Iterable[str]) -> None:
    """400 for a name in order/only/ignore that matches no provider or endpoint of the catalog."""
    names = {name.lower() for name in known}
    for field, values in (("order", prefs.order), ("only", sorted(prefs.only or ())), ("ignore", sorted(prefs.ignore))):
        for value in values:
            if value not in names:
                raise _fail(field, f"Unknown provider '{value}' in 'provider.{field}'; known: {', '.join(sorted(names))}.")


def names_of(provider: str, endpoint_id: str) -> tuple[str, str]:
    return provider.lower(), endpoint_id.lower()
