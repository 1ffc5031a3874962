"""Baseline policies, for comparison and for operators who want them: round-robin, least-loaded,
session-sticky (consistent hashing on the conversation's family key, no load bound), config order
and random."""

from __future__ import annotations

import random
from collections.abc import Sequence

from gateway.catalog import Endpoint
from gateway.routing.decision import Decision, Scored
from gateway.routing.features import RequestFeatures
from gateway.routing.hashring import rendezvous_order
from gateway.routing.settings import RoutingConfig
from gateway.routing.snapshot import Snapshot


def _ranked(name: str, order: Sequence[Endpoint], s: Snapshot) -> Decision:
    return Decision(name, [Scored(ep, float(i), inflight=s.inflight(ep.id)) for i, ep in enumerate(order)])


def config_order(c: Sequence[Endpoint], s: Snapshot, f: RequestFeatures, cfg: RoutingConfig, rng: random.Random) -> Decision:
    return _ranked("config_order", c, s)


def round_robin(c: Sequence[Endpoint], s: Snapshot, f: RequestFeatures, cfg: RoutingConfig, rng: random.Random) -> Decision:
    if not c:
        return Decision("round_robin", [])
    start = s.sequence(f.model) % len(c)
    return _ranked("round_robin", [*c[start:], *c[:start]], s)


def least_loaded(c: Sequence[Endpoint], s: Snapshot, f: RequestFeatures, cfg: RoutingConfig, rng: random.Random) -> Decision:
    def utilisation(ep: Endpoint) -> float:
        slots = ep.deployment.routing.slots
        return s.inflight(ep.id) / slots if slots else s.inflight(ep.id)

    # Ties go round-robin, so an idle pool is not all sent to the first endpoint.
    start = s.sequence(f.model) % len(c) if c else 0
    rotated = [*c[start:], *c[:start]]
    return _ranked("least_loaded", sorted(rotated, key=utilisation), s)


def session_sticky(c: Sequence[Endpoint], s: Snapshot, f: RequestFeatures, cfg: RoutingConfig, rng: random.Random) -> Decision:
    by_id = {ep.id: ep for ep in c}
    return _ranked("session_sticky", [by_id[e] for e in rendezvous_order(f.family, list(by_id))], s)


def random_order(c: Sequence[Endpoint], s: Snapshot, f: RequestFeatures, cfg: RoutingConfig, rng: random.Random) -> Decision:
    order = list(c)
    rng.shuffle(order)
    return _ranked("random", order, s)
