"""What the route stage hands dispatch: the endpoints to try, in order, and whether it failed open.

`gateway.routing.router.Router.route` produces it (filters with reason codes, score terms, guards).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.catalog import Endpoint


@dataclass(frozen=True, slots=True)
class Ordering:
    endpoints: tuple[Endpoint, ...]
    # Every candidate was ruled out, so all are tried anyway; the response says so.
    fail_open: str | None = None
