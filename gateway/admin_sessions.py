"""Dashboard sign-in sessions: a random session id in an HttpOnly cookie, mapped in memory to a
CSRF token that state-changing admin calls must echo in the ``x-csrf-token`` header.

The admin key itself never reaches the page: the browser holds only the opaque session id (which
scripts cannot read) and the CSRF token. Sessions live in this process's memory, so they end with
it and are not shared between replicas (sign in again, or pin the dashboard to one replica).

No I/O; time is passed in (any monotonic seconds).
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from kernel.errors import AuthenticationFailed, PermissionDenied

COOKIE = "gw_admin_session"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(slots=True)
class Session:
    id: str
    csrf: str
    created: float
    expires: float
    last_seen: float


class SessionStore:
    def __init__(self, ttl: float = 12 * 3600, max_sessions: int = 1000, *, idle: float = 1800.0) -> None:
        self.ttl = ttl
        self.idle = idle  # a session unused this long ends, whatever its ttl says
        self.max_sessions = max_sessions
        self._sessions: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, now: float) -> Session:
        self._prune(now)
        while (
            len(self._sessions) >= self.max_sessions
        ):  # drop the oldest (dicts keep insertion order)
            del self._sessions[next(iter(self._sessions))]
        session = Session(
            secrets.token_urlsafe(32), secrets.token_urlsafe(32), now, now + self.ttl, now
        )
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str | None, now: float) -> Session | None:
        """The live session for this id, or None (unknown, revoked, expired or idle too long);
        a live one counts as used now."""
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if now >= session.expires or now - session.last_seen >= self.idle:
            del self._sessions[session_id]
            return None
        session.last_seen = now
        return session

    def revoke(self, session_id: str | None) -> bool:
        return self._sessions.pop(session_id or "", None) is not None

    def _prune(self, now: float) -> None:
        for sid in [sid for sid, s in self._sessions.items() if now >= s.expires or now - s.last_seen >= self.idle]:
            del self._sessions[sid]


def csrf_ok(session: Session, method: str, header: str | None) -> bool:
    """Safe methods pass; others need the session's CSRF token in the header (constant-time compare)."""
    if method.upper() in SAFE_METHODS:
        return True
    return header is not None and hmac.compare_digest(
        header.encode(), session.csrf.encode()
    )


def admit(
    sessions: SessionStore,
    cookie: str | None,
    method: str,
    csrf_header: str | None,
    now: float,
) -> Session:
    """The caller's session, checked for CSRF on state-changing methods. Raises AuthenticationFailed
    (no live session) or PermissionDenied (CSRF token missing or wrong)."""
    session = sessions.get(cookie, now)
    if session is None:
        raise AuthenticationFailed(
            "The dashboard session has expired or was signed out: sign in again."
        )
    if not csrf_ok(session, method, csrf_header):
        raise PermissionDenied(
            f"This action needs the session's CSRF token in the {CSRF_HEADER} header.",
            code="csrf_failed",
        )
    return session
