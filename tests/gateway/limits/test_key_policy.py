"""Where a key's requests may go: its own and its team's allowed regions (names or patterns,
matched against the catalog's regions) and data policy narrow routing.keys' policy, for config
keys and for the database's records alike."""

from __future__ import annotations

from gateway.config import load_config
from gateway.limits.policy import KeyRecord, Scope, allowed_regions
from gateway.limits.store import MemoryLimitStore
from gateway.routing.settings import KeyPolicy
from tests.gateway.limits.helpers import limiter, settings

REGIONS = ("eu-west", "eu-north", "us-east", "US-West")


def test_allowed_regions_intersect_the_lists_over_the_known_regions() -> None:
    assert allowed_regions([None, None], REGIONS) is None
    assert allowed_regions([("eu-*",)], REGIONS) == ("eu-north", "eu-west")
    assert allowed_regions([("eu-*",), ("eu-west", "us-east")], REGIONS) == ("eu-west",)
    assert allowed_regions([("us-*",), None], REGIONS) == ("us-east", "us-west")  # lower case, as routing compares
    assert allowed_regions([("eu-*",), ("us-east",)], REGIONS) == ()  # disjoint lists allow nothing
    assert allowed_regions([("ap-*",)], REGIONS) == ()


def test_config_key_and_team_narrow_routing_keys_policy() -> None:
    cfg = settings(
        [
            {"name": "member", "team": "eu", "allowed_regions": ["eu-west", "us-east"]},
            {"name": "private", "data_collection": "deny"},
            {"name": "plain"},
        ],
        teams={"eu": {"allowed_regions": ["EU-*"]}},
    )
    lim = limiter(cfg, MemoryLimitStore(), regions=REGIONS)
    base = KeyPolicy()
    member = lim.key_policy("member", base)
    assert member.regions == ("eu-west",) and member.data_collection == "allow"
    assert lim.key_policy("member", base) is member  # remembered: no work per request
    assert lim.key_policy("private", base).data_collection == "deny"
    assert lim.key_policy("plain", base) is base and lim.key_policy(None, base) is base
    # routing.keys' regions narrow it further, and its deny stands.
    narrowed = lim.key_policy("member", KeyPolicy(regions=("us-east",), data_collection="deny", rpm=5))
    assert narrowed.regions == () and narrowed.data_collection == "deny" and narrowed.rpm == 5


def test_stored_records_steer_and_a_refresh_replaces_them() -> None:
    cfg = load_config(
        environ={},
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p"}],
    )
    lim = limiter(cfg, MemoryLimitStore(), regions=REGIONS)
    team = Scope("team", "t", data_collection="deny")
    lim.set_stored({"db": KeyRecord(Scope("key", "db", allowed_regions=("us-*",)), team)})
    policy = lim.key_policy("db", KeyPolicy())
    assert policy.regions == ("us-east", "us-west") and policy.data_collection == "deny"
    lim.set_stored({"db": KeyRecord(Scope("key", "db"))})
    assert lim.key_policy("db", KeyPolicy()) == KeyPolicy()
