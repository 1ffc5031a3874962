"""The one state object the app's lifespan builds; handlers reach it as ``request.state.gw``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.catalog import Catalog
from gateway.config import Settings
from gateway.pipeline.account import Accountant
from gateway.pipeline.auth import Authenticator
from gateway.pipeline.dispatch import Dispatcher
from gateway.routing.breaker import CircuitBreaker
from providers.http import HTTPClient


@dataclass
class AppState:
    settings: Settings
    catalog: Catalog
    auth: Authenticator
    breaker: CircuitBreaker
    dispatcher: Dispatcher
    accountant: Accountant
    client: HTTPClient
    clock: Callable[[], float]
    # Supervised local engines (providers.engines.EngineSupervisor), already started.
    engines: Sequence[Any] = field(default_factory=tuple)
