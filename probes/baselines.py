"""Frozen baselines per (endpoint, probe, key): the golden logprob window, a reference self-run's
scores, an endpoint's own agent pass rate. Written once, replaced only on a declared rebaseline,
never because of an alarm. `MemoryBaselines` is the fake and the default without a database."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class BaselineStore(Protocol):
    async def get(self, endpoint_id: str, probe: str, key: str) -> Mapping[str, Any] | None: ...

    async def put(self, endpoint_id: str, probe: str, key: str, data: Mapping[str, Any], *, at: float) -> None: ...

    async def clear(self, endpoint_id: str, probe: str | None = None) -> int:
        """Forget an endpoint's baselines (a declared upstream change). Returns how many."""
        ...


class MemoryBaselines:
    def __init__(self) -> None:
        self._data: dict[tuple[str, str, str], dict[str, Any]] = {}

    async def get(self, endpoint_id: str, probe: str, key: str) -> Mapping[str, Any] | None:
        return self._data.get((endpoint_id, probe, key))

    async def put(self, endpoint_id: str, probe: str, key: str, data: Mapping[str, Any], *, at: float) -> None:
        self._data[(endpoint_id, probe, key)] = dict(data)

    async def clear(self, endpoint_id: str, probe: str | None = None) -> int:
        doomed = [k for k in self._data if k[0] == endpoint_id and (probe is None or k[1] == probe)]
        for k in doomed:
            del self._data[k]
        return len(doomed)
