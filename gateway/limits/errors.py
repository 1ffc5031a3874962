"""The limiter's errors, as OpenAI clients expect them (the SDKs' RateLimitError for 429,
PermissionDeniedError for 403, AuthenticationError for 401)."""

from __future__ import annotations

from kernel.errors import (
    AuthenticationFailed,
    PermissionDenied,
    RateLimited,
    Unavailable,
)


class QuotaExceeded(RateLimited):
    """A budget is spent: retrying will not help until the period resets (OpenAI's own wording
    of an exhausted quota is 429 with type and code `insufficient_quota`)."""

    error_type = "insufficient_quota"
    code = "insufficient_quota"


class ModelNotAllowed(PermissionDenied):
    code = "model_not_allowed"


class KeyExpired(AuthenticationFailed):
    code = "expired_api_key"


class LimitsUnavailable(Unavailable):
    code = "limits_unavailable"


def openai_duration(seconds: float) -> str:
    """OpenAI's x-ratelimit-reset-* form: "20ms", "1s", "6m0s", "1h2m3s"."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    whole = round(seconds)
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{s}s"
    if m:
        return f"{m}m{s}s"
    return f"{s}s"
