"""Routing settings: validated once, with one-line errors naming the field."""

from __future__ import annotations

import pytest

from gateway.config import load_config
from kernel.errors import ConfigError


def test_defaults() -> None:
    s = load_config(environ={})
    assert s.routing.policy == "score" and s.state_store.backend == "memory"
    assert s.routing.affinity.block_bytes == 512 and s.routing.guards.explore == 0.0
    assert s.routing.weights.evict == 1.0 and s.routing.weights.reuse_s == 60.0


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"routing": {"policy": "fastest"}}, "unknown routing policy 'fastest'"),
        ({"routing": {"latency": {"bands": [2048, 512]}}}, "bands must be positive and strictly increasing"),
        ({"routing": {"weights": {"cost": -1}}}, "routing.weights.cost"),
        ({"routing": {"weights": {"reuse_s": 0}}}, "routing.weights.reuse_s"),
        ({"routing": {"weights": {"evict": -1}}}, "routing.weights.evict"),
        ({"routing": {"keys": {"a": {"data_collection": "maybe"}}}}, "routing.keys.a.data_collection"),
        ({"state_store": {"backend": "etcd"}}, "state_store.backend"),
        ({"providers": [{"name": "p", "base_url": "http://p/v1"}], "deployments": [{"model": "m", "provider": "p", "routing": {"slots": 0}}]}, "deployments.0.routing.slots"),
        ({"providers": [{"name": "p", "base_url": "http://p/v1"}], "deployments": [{"model": "m", "provider": "p", "routing": {"cache": {"kind": "magic"}}}]}, "deployments.0.routing.cache.kind"),
    ],
)
def test_bad_values_name_the_field(overrides: dict, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(environ={}, **overrides)
    assert words in info.value.message


def test_environment_overrides() -> None:
    s = load_config(environ={"GW_STATE_STORE__BACKEND": "redis", "GW_ROUTING__POLICY": "round_robin"})
    assert s.state_store.backend == "redis" and s.routing.policy == "round_robin"
