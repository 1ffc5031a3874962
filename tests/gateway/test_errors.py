"""The error tree: status, type and code per class, and AllAttemptsFailed following the last error."""

from __future__ import annotations

import pytest

from kernel.errors import (
    AllAttemptsFailed,
    AuthenticationFailed,
    GatewayError,
    InvalidRequest,
    ModelNotFound,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    ProviderAuthError,
    ProviderConnectError,
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderServerError,
    ProviderStreamError,
    ProviderTimeout,
    RateLimited,
    RequestError,
    Unavailable,
    UnsupportedParameter,
)


@pytest.mark.parametrize(
    ("cls", "status", "type_", "code"),
    [
        (GatewayError, 500, "api_error", None),
        (InvalidRequest, 400, "invalid_request_error", None),
        (UnsupportedParameter, 400, "invalid_request_error", "unsupported_parameter"),
        (AuthenticationFailed, 401, "invalid_request_error", "invalid_api_key"),
        (PermissionDenied, 403, "permission_denied", "permission_denied"),
        (NotFound, 404, "invalid_request_error", "not_found"),
        (ModelNotFound, 404, "invalid_request_error", "model_not_found"),
        (PayloadTooLarge, 413, "invalid_request_error", "payload_too_large"),
        (RateLimited, 429, "rate_limit_error", "rate_limit_exceeded"),
        (ProviderConnectError, 502, "api_error", "upstream_unreachable"),
        (ProviderTimeout, 504, "api_error", "upstream_timeout"),
        (ProviderRateLimited, 429, "rate_limit_error", "upstream_rate_limited"),
        (ProviderServerError, 502, "api_error", "upstream_server_error"),
        (ProviderAuthError, 502, "api_error", "upstream_auth_failed"),
        (ProviderStreamError, 502, "api_error", "upstream_stream_error"),
        (Unavailable, 503, "api_error", "no_endpoint_available"),
    ],
)
def test_class_attributes(cls: type[GatewayError], status: int, type_: str, code: str | None) -> None:
    err = cls("boom")
    assert (err.status_code, err.error_type, err.code, err.message, str(err)) == (status, type_, code, "boom", "boom")


def test_client_errors_are_request_errors() -> None:
    for cls in (
        InvalidRequest,
        UnsupportedParameter,
        AuthenticationFailed,
        PermissionDenied,
        ModelNotFound,
        PayloadTooLarge,
        RateLimited,
    ):
        assert issubclass(cls, RequestError)
    assert not issubclass(ProviderRejected, RequestError)


def test_param_code_and_headers() -> None:
    err = InvalidRequest("bad", param="messages[0].role", code="custom", headers={"x": "1"})
    assert (err.param, err.code, err.headers) == ("messages[0].role", "custom", {"x": "1"})
    assert InvalidRequest("bad").code is None and InvalidRequest("bad").headers == {}


def test_provider_error_flags() -> None:
    assert (ProviderServerError("x").retryable, ProviderServerError("x").fallback) == (True, True)
    rejected = ProviderRejected("x", status_code=422, endpoint="e", upstream_status=422)
    assert (rejected.status_code, rejected.retryable, rejected.fallback, rejected.counts_against_endpoint) == (
        422,
        False,
        False,
        False,
    )
    assert ProviderRejected("x").status_code == 400
    assert ProviderAuthError("x").retryable is False and ProviderAuthError("x").fallback is True


def test_status_is_per_instance() -> None:
    a, b = ProviderRejected("x", status_code=404), ProviderRejected("y")
    assert (a.status_code, b.status_code, ProviderRejected.status_code) == (404, 400, 502)


def test_all_attempts_failed_follows_the_last_error() -> None:
    last = ProviderRateLimited("slow down", endpoint="b/m", retry_after=2.4)
    err = AllAttemptsFailed("all failed", last=last, attempts=3)
    assert (err.status_code, err.error_type, err.code, err.attempts) == (
        429,
        "rate_limit_error",
        "upstream_rate_limited",
        3,
    )
    assert err.headers == {"retry-after": "2"}
    assert isinstance(err, Unavailable)


def test_all_attempts_failed_retry_after_is_at_least_one_second() -> None:
    err = AllAttemptsFailed("x", last=ProviderServerError("y", retry_after=0.2), attempts=1)
    assert err.headers == {"retry-after": "1"}


def test_all_attempts_failed_without_a_last_error() -> None:
    err = AllAttemptsFailed("x", last=None, attempts=0)
    assert (err.status_code, err.code, err.headers) == (503, "no_endpoint_available", {})


def test_provider_errors_are_not_client_errors() -> None:
    assert issubclass(ProviderError, GatewayError) and not issubclass(ProviderError, RequestError)
