"""Filters: rule candidates out before scoring, each with a reason code (`decision.REASONS`).

Pure functions of (endpoint, features, snapshot). The first failing check names the reason, in
this order: readiness; what the request and its key allow (mode, capabilities, context window,
region, data policy, provider preferences); then the endpoint's state (health, breaker,
rate-limit headroom).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gateway.catalog import Endpoint
from gateway.routing import capabilities
from gateway.routing.decision import NOT_READY, Filtered
from gateway.routing.features import RequestFeatures
from gateway.routing.preferences import NO_PREFERENCES
from gateway.routing.snapshot import Snapshot

Check = Callable[[Endpoint, RequestFeatures, Snapshot], "tuple[str, str] | None"]


def _names(endpoint: Endpoint) -> tuple[str, str]:
    return endpoint.provider.lower(), endpoint.id.lower()


def check_mode(ep: Endpoint, f: RequestFeatures, s: Snapshot) -> tuple[str, str] | None:
    if not capabilities.serves(ep.deployment.capabilities, f.op):
        return "mode", f"does not serve the {f.op} endpoint"
    return None


def check_capabilities(ep: Endpoint, f: RequestFeatures, s: Snapshot) -> tuple[str, str] | None:
    return capabilities.unmet(ep.deployment.capabilities, f.needs, f.top_logprobs)


def check_context(ep: Endpoint, f: RequestFeatures, s: Snapshot) -> tuple[str, str] | None:
    window = ep.deployment.context_window
    need = f.prompt_tokens + (f.max_output_tokens or 0)
    if f.op != "embeddings" and need > window:
        how = "counted" if f.exact_prompt_tokens is not None else "estimated"
        return "context_window", f"{f.prompt_tokens} prompt tokens ({how}) + {f.max_output_tokens or 0} output > window {window}"
    return None


def check_region(ep: Endpoint, f: RequestFeatures, s: Snapshot) -> tuple[str, str] | None:
    region = ep.region.lower()
    allowed = f.key_policy.regions
    if allowed is not None and region not in {r.lower() for r in allowed}:
        return "region", f"region {ep.region} is not allowed for this key"
    if f.prefs.regions is not None and region not in f.prefs.regions:
        return "region", f"region {ep.region} is not among the requested regions"
    return None


def check_data_policy(ep: Endpoint, f: RequestFeatures, s: Snapshot) -> tuple[str, str] | None:
    if ep.keeps_prompts and (f.key_policy.data_collection == "deny" or f.prefs.data_collection == "deny"):
        who = "key" if f.key_policy.data_collection == "deny" else "request"
        return "data_policy", f"provider may keep prompts; the {who} denies data collection"
    return None


def check_preferences(ep: Endpoint, f: RequestFeatures, s: Snapshot) -> tuple[str, str] | None:
    p = f.prefs
    names = _names(ep)
    if p.ignore and (names[0] in p.ignore or names[1] in p.ignore):
        return "pref_ignored", "listed in provider.ignore"
    if p.only is not None and names[0] not in p.only and names[1] not in p.only:
        return "pref_only", "not listed in provider.only"
    if p.order and not p.allow_fallbacks and names[0] not in p.order and names[1] not in p.order:
        return "pref_order", "not in provider.order and allow_fallbacks is false"
    price = ep.deployment.price
    if p.max_prompt is not None and price.input > p.max_prompt:
        return "max_price", f"prompt price {price.input} > max {p.max_prompt} USD/1M"
    if p.max_completion is not None and price.output > p.max_completion:
        return "max_price", f"completion price {price.output} > max {p.max_completion} USD/1M"
    if p.max_request is not None:
        worst = (f.prompt_tokens * price.input + f.expected_output_tokens * price.output) / 1e6
        if worst > p.max_request:
            return "max_price", f"expected request cost {worst:.6f} > max {p.max_request} USD"
    if p.require_parameters:
        ignored = sorted(f.params & set(ep.deployment.routing.unsupported_params))
        if ignored:
            return "require_parameters", f"ignores {', '.join(ignored)}"
    return None


def check_health(ep: Endpoint, f: RequestFeatures, s: Snapshot) -> tuple[str, str] | None:
    if s.health(ep.id) == "demoted":
        return "health_demoted", "demoted by the quality probes or an operator"
    return None


def check_breaker(ep: Endpoint, f: RequestFeatures, s: Snapshot) -> tuple[str, str] | None:
    reason = s.blocked(ep.id)
    if reason is not None:
        return reason, "circuit breaker open" if reason == "breaker_open" else "upstream asked to retry later"
    return None


def check_rate(ep: Endpoint, f: RequestFeatures, s: Snapshot) -> tuple[str, str] | None:
    r = ep.deployment.routing
    if r.rpm is None and r.tpm is None:
        return None
    if not s.rate_headroom(ep, f.prompt_tokens + f.expected_output_tokens):
        return "rate_limited", "no RPM/TPM headroom left on this deployment"
    return None


CHECKS: tuple[Check, ...] = (
    check_mode,
    check_capabilities,
    check_context,
    check_region,
    check_data_policy,
    check_preferences,
    check_health,
    check_breaker,
    check_rate,
)


def check_plain(ep: Endpoint, f: RequestFeatures, s: Snapshot) -> tuple[str, str] | None:
    """mode, context window, health, breaker and rate headroom in one call (the common case:
    no capabilities, preferences or key policy to check)."""
    deployment = ep.deployment
    if not capabilities.serves(deployment.capabilities, f.op):
        return check_mode(ep, f, s)
    if f.prompt_tokens + (f.max_output_tokens or 0) > deployment.context_window:
        return check_context(ep, f, s)
    return check_health(ep, f, s) or check_breaker(ep, f, s) or check_rate(ep, f, s)


_PLAIN = (check_plain,)


def active_checks(f: RequestFeatures) -> Sequence[Check]:
    """The checks that can rule anything out for this request (the others are skipped)."""
    if (
        not f.needs
        and f.op != "embeddings"
        and f.prefs is NO_PREFERENCES
        and f.key_policy.regions is None
        and f.key_policy.data_collection == "allow"
    ):
        return _PLAIN
    checks: list[Check] = [check_mode]
    if f.needs:
        checks.append(check_capabilities)
    if f.op != "embeddings":
        checks.append(check_context)
    if f.key_policy.regions is not None or f.prefs.regions is not None:
        checks.append(check_region)
    if f.key_policy.data_collection == "deny" or f.prefs.data_collection == "deny":
        checks.append(check_data_policy)
    if f.prefs is not NO_PREFERENCES:
        checks.append(check_preferences)
    checks += (check_health, check_breaker, check_rate)
    return checks


def apply_filters(
    candidates: Sequence[Endpoint], features: RequestFeatures, snapshot: Snapshot, checks: Sequence[Check] | None = None
) -> tuple[list[Endpoint], list[Filtered]]:
    if checks is None:
        checks = active_checks(features)
    kept: list[Endpoint] = []
    filtered: list[Filtered] = []
    for ep in candidates:
        if not snapshot.ready(ep):
            filtered.append(Filtered(ep, NOT_READY, "starting or restarting"))
            continue
        for check in checks:
            out = check(ep, features, snapshot)
            if out is not None:
                filtered.append(Filtered(ep, out[0], out[1]))
                break
        else:
            kept.append(ep)
    return kept, filtered
