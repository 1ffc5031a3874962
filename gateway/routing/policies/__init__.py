"""Routing policies: name -> ``choose(candidates, snapshot, features, config, rng) -> Decision``.

Each is a pure function of its arguments (sync, no I/O, clock and RNG injected through the
snapshot and `rng`). Candidates arrive filtered and in configuration order; the policy ranks them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from gateway.catalog import Endpoint
from gateway.routing.decision import Decision
from gateway.routing.features import RequestFeatures
from gateway.routing.policies import baseline, scored
from gateway.routing.settings import RoutingConfig
from gateway.routing.snapshot import Snapshot

Policy = Callable[[Sequence[Endpoint], Snapshot, RequestFeatures, RoutingConfig, random.Random], Decision]

POLICIES: Mapping[str, Policy] = {
    "score": scored.choose,
    "round_robin": baseline.round_robin,
    "least_loaded": baseline.least_loaded,
    "session_sticky": baseline.session_sticky,
    "config_order": baseline.config_order,
    "random": baseline.random_order,
}
