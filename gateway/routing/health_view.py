"""What routing reads of endpoint health (`gateway.health_states.HealthStates` provides it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class HealthView(Protocol):
    def state(self, endpoint_id: str) -> str: ...

    def get(self, endpoint_id: str) -> Any: ...

    def snapshot(self) -> Mapping[str, Any]: ...

    def apply(self, stored: Mapping[str, Any]) -> int: ...


class AllHealthy:
    """No health states (no probes): every endpoint is healthy."""

    def state(self, endpoint_id: str) -> str:
        return "healthy"

    def get(self, endpoint_id: str) -> Any:
        return None

    def snapshot(self) -> Mapping[str, Any]:
        return {}

    def apply(self, stored: Mapping[str, Any]) -> int:
        return 0
