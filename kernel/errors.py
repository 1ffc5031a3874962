"""The gateway's one error tree.

Everything below the HTTP edge raises one of these; only `gateway.http.errors`
turns them into OpenAI error JSON (``{"error": {"message", "type", "param", "code"}}``).
An upstream failure's `message` is the detail (for the log and the request record); clients get
its `client_message()`, a stable text per class, since the detail can hold a fragment of a
provider key or an internal address.

GatewayError                         500 api_error
├── ConfigError                      start-up only: a one-line message naming the field
├── RequestError                     the client's fault (4xx)
│   ├── InvalidRequest               400 invalid_request_error
│   │   └── UnsupportedParameter     400 code=unsupported_parameter
│   ├── AuthenticationFailed         401 code=invalid_api_key
│   ├── PermissionDenied             403
│   ├── NotFound                     404
│   │   └── ModelNotFound            404 code=model_not_found
│   ├── PayloadTooLarge              413
│   └── RateLimited                  429 (the gateway's own limits)
├── ProviderError                    an upstream failed; carries `retryable`
│   ├── ProviderConnectError         connect refused/reset before a response
│   ├── ProviderTimeout              connect, first-byte, between-chunks or total timeout
│   ├── ProviderRateLimited          upstream 429 (may carry retry_after)
│   ├── ProviderServerError          upstream 5xx
│   ├── ProviderAuthError            upstream 401/403: our credentials, not the client's
│   ├── ProviderRejected             upstream 4xx about the request itself: passed to the client
│   ├── ProviderStreamError          the stream broke after it started
│   └── ProviderResponseTooLarge     502 code=upstream_response_too_large (upstream.limits)
└── Unavailable                      503: no endpoint can take the request now
    ├── KeyStoreUnavailable          503: the database's keys are not loaded, or too stale to trust
    └── AllAttemptsFailed            every candidate failed; status follows the last error
"""

from __future__ import annotations


class GatewayError(Exception):
    status_code = 500
    error_type = "api_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.headers = headers or {}

    def client_message(self) -> str:
        """What the client reads; the gateway's own errors say it all, an upstream's do not."""
        return self.message


class ConfigError(GatewayError):
    """A configuration problem found at start-up."""


# --- the client's fault ---------------------------------------------------


class RequestError(GatewayError):
    status_code = 400
    error_type = "invalid_request_error"


class InvalidRequest(RequestError):
    pass


class UnsupportedParameter(InvalidRequest):
    code = "unsupported_parameter"


class AuthenticationFailed(RequestError):
    status_code = 401
    code = "invalid_api_key"


class PermissionDenied(RequestError):
    status_code = 403
    error_type = "permission_denied"
    code = "permission_denied"


class NotFound(RequestError):
    status_code = 404
    code = "not_found"


class ModelNotFound(NotFound):
    code = "model_not_found"


class PayloadTooLarge(RequestError):
    status_code = 413
    code = "payload_too_large"


class RateLimited(RequestError):
    status_code = 429
    error_type = "rate_limit_error"
    code = "rate_limit_exceeded"


# --- upstream failures -----------------------------------------------------


class ProviderError(GatewayError):
    """An upstream failed. `retryable` says whether the same endpoint may be tried again."""

    status_code = 502
    error_type = "api_error"
    code: str | None = "upstream_error"
    public_message = "The upstream provider failed to answer the request."
    retryable = True
    # Whether another endpoint may be tried. False when the request itself is at fault.
    fallback = True
    # Whether the failure counts against the endpoint's circuit breaker.
    counts_against_endpoint = True

    def __init__(
        self,
        message: str,
        *,
        endpoint: str = "",
        upstream_status: int | None = None,
        retry_after: float | None = None,
        upstream_body: object = None,
        **kwargs: object,
    ) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.endpoint = endpoint
        self.upstream_status = upstream_status
        self.retry_after = retry_after
        self.upstream_body = upstream_body

    def client_message(self) -> str:
        return self.public_message


class ProviderConnectError(ProviderError):
    code = "upstream_unreachable"
    public_message = "The upstream provider could not be reached."


class ProviderTimeout(ProviderError):
    status_code = 504
    code = "upstream_timeout"
    public_message = "The upstream provider did not answer in time."


class ProviderRateLimited(ProviderError):
    status_code = 429
    error_type = "rate_limit_error"
    code = "upstream_rate_limited"
    public_message = "The upstream provider is limiting the rate of requests; retry later."


class ProviderServerError(ProviderError):
    code = "upstream_server_error"
    public_message = "The upstream provider had an internal error."


class ProviderAuthError(ProviderError):
    retryable = False
    code = "upstream_auth_failed"
    public_message = "The upstream provider refused the gateway's credentials for it (the gateway's configuration)."


class ProviderRejected(ProviderError):
    """The upstream refused the request itself (400, 404, 422...). Passed through as a 4xx."""

    retryable = False
    fallback = False
    counts_against_endpoint = False
    error_type = "invalid_request_error"
    code = None

    def __init__(self, message: str, *, status_code: int = 400, **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.status_code = status_code

    def client_message(self) -> str:
        return self.message  # the upstream's word on the client's own request (context too long...)


class ProviderStreamError(ProviderError):
    code = "upstream_stream_error"
    public_message = "The upstream provider's stream broke off."


class ProviderResponseTooLarge(ProviderError):
    """The answer (decoded) or its headers passed `upstream.limits`: asking again will not shrink it."""

    code = "upstream_response_too_large"
    public_message = (
        "The upstream provider's answer is larger than the gateway accepts (upstream.limits.max_response_bytes)."
    )
    retryable = False
    fallback = False
    counts_against_endpoint = False


# --- nothing could serve it ------------------------------------------------


class Unavailable(GatewayError):
    status_code = 503
    error_type = "api_error"
    code: str | None = "no_endpoint_available"


class KeyStoreUnavailable(Unavailable):
    code = "key_store_unavailable"


class AllAttemptsFailed(Unavailable):
    """Every candidate failed. Status and code follow the last upstream error."""

    def __init__(self, message: str, *, last: ProviderError | None, attempts: int, model: str = "") -> None:
        super().__init__(message)
        self.last = last
        self.attempts = attempts
        self.model = model
        if last is not None:
            self.status_code = last.status_code
            self.error_type = last.error_type
            self.code = last.code
            if last.retry_after is not None:
                self.headers = {"retry-after": str(max(1, round(last.retry_after)))}

    def client_message(self) -> str:
        if self.last is None:
            return self.message
        return f"All {self.attempts} attempts for `{self.model}` failed: {self.last.client_message()}"
