"""Mask credentials in URLs before they reach a log line, an error message or an HTTP answer:
``redis://:pw@host`` -> ``redis://:***@host``, ``...?password=pw`` -> ``...?password=***``."""

from __future__ import annotations

import logging
import re

# scheme://user:password@  (the user stays: it names an account, it opens nothing)
# The password runs to the last "@" before the host, as URL parsers (redis-py's too) read it.
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^:@/\s]*:)[^/\s]*@")
# ?password=... in a URL, and libpq's key=value form (password=... or password='...').
_QUERY_SECRET = re.compile(
    r"((?:^|[?&\s])(?:password|passwd|pwd|token|secret|api_key|apikey)\s*=\s*)(?:'(?:[^'\\]|\\.)*'|[^&\s#]+)",
    re.IGNORECASE,
)


def mask_urls(text: str) -> str:
    """`text` with the password of every URL in it replaced by ***."""
    return _QUERY_SECRET.sub(r"\1***", _USERINFO.sub(r"\1***@", text))


class RedactingFilter(logging.Filter):
    """On a handler: every record leaves with the passwords in its URLs masked, whoever logged it
    (our code, uvicorn, a driver's exception text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_urls(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and record.exc_text is None and record.exc_info[0] is not None:
            record.exc_text = mask_urls(logging.Formatter().formatException(record.exc_info))
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
