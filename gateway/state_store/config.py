"""The state store's configuration slice (`Settings.state_store`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kernel.frozen import Frozen


class StateStoreConfig(Frozen):
    """Where routing state shared by gateway replicas lives."""

    backend: Literal["memory", "redis"] = "memory"
    url: str = "redis://127.0.0.1:6379/0"
    key_prefix: str = "gw:"
    # How often each replica pushes its deltas and pulls the shared view.
    sync_interval_s: float = Field(0.25, gt=0)
    # Latency statistics move slowly (half-lives of minutes): push and pull them every N syncs.
    latency_every: int = Field(4, ge=1)
    # Per-operation timeout: an outage must not stall requests.
    timeout_s: float = Field(0.25, gt=0)
    # Defaults to host:pid.
    replica_id: str | None = None
    # Bounded buffers kept while the store is away, replayed when it returns.
    max_pending_affinity: int = Field(20_000, ge=0)
