"""The headline end-to-end set-up: testbed endpoints (real small models behind fault injection)
as the gateway's providers, the testbed's honest endpoint as the reference, and a real gateway
served by uvicorn on loopback; `gwctl probe` talks to it over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from gateway.app import create_app
from gateway.config import Settings, load_config
from probes.testbed.harness import EndpointSpec, Testbed
from tests.fakes.servers import BackgroundLoop, GatewayServer

ADMIN_KEY = "sk-gw-admin-probes-0001"
USER_KEY = "sk-gw-user-probes-0002"

# Testbed endpoint -> gateway provider. "target" carries the faults; it is also served as the
# only deployment of the model "solo", whose demotion must make the gateway fail open.
PROVIDERS = {"tb-ref": "ref", "tb-honest": "honest-2", "tb-target": "target"}

# Small samples, fixed seeds (the runner's rng is seeded by probes.seed; T=0 drift answers are
# deterministic, distribution samples carry per-sample seeds).
PROBES: dict[str, Any] = {
    "seed": 0,
    "references": {"smollm2": "tb-ref/smollm2"},
    # T=0 answers are deterministic: 6 vs 6 identical windows already give a permutation p < 0.01.
    "drift": {"prompts": ["x"], "requests": 6, "permutations": 1000},
    "distribution": {"prompts": 4, "samples_per_prompt": 4, "max_tokens": 8, "permutations": 1000},
    "fidelity": {"samples": 80},
    # Six identical T=0 answers a window put the exact permutation floor at 2/924 per comparison
    # (x2 Bonferroni): the default confirm_alpha of 0.001 is below it, so these small windows
    # confirm at 0.01.
    "health": {"demoted_min_seconds": 0, "probation_seconds": 0, "clean_windows": 1, "confirm_alpha": 0.01},
}


def gateway_settings(tb: Testbed) -> Settings:
    providers = [{"name": name, "kind": "openai", "base_url": tb.base_url(ep)} for name, ep in PROVIDERS.items()]
    providers.append({"name": "tb-solo", "kind": "openai", "base_url": tb.base_url("target")})
    deployments = [{"model": "smollm2", "provider": name} for name in PROVIDERS]
    deployments.append({"model": "solo", "provider": "tb-solo", "upstream_model": "smollm2"})
    return load_config(
        environ={},
        auth={"admin_key": ADMIN_KEY, "keys": [{"name": "user", "key": USER_KEY}]},
        providers=providers,
        deployments=deployments,
        probes=PROBES,
        timeouts={"connect": 2, "first_byte": 60, "between_chunks": 60, "total": 120},
    )


@pytest.fixture(scope="package")
def testbed() -> Iterator[Testbed]:
    specs = [
        EndpointSpec("ref", model="smollm2"),
        EndpointSpec("target", model="smollm2"),
        EndpointSpec("honest-2", model="smollm2", process=1),  # same weights, another process
    ]
    with Testbed(specs) as tb:
        yield tb


@contextmanager
def serve_gateway(testbed: Testbed) -> Iterator[GatewayServer]:
    loop = BackgroundLoop().start()
    server = GatewayServer(create_app(gateway_settings(testbed)), loop).start()
    try:
        yield server
    finally:
        server.stop()
        loop.stop()


@pytest.fixture(scope="package")
def gateway(testbed: Testbed) -> Iterator[GatewayServer]:
    with serve_gateway(testbed) as server:
        yield server


@pytest.fixture
def fresh_gateway(testbed: Testbed) -> Iterator[GatewayServer]:
    """A gateway of its own (health, evidence, fleet round and probe RNG as at start-up): for a test
    whose outcome must not depend on the rounds earlier tests ran (which conversation a probe draws)."""
    with serve_gateway(testbed) as server:
        yield server
