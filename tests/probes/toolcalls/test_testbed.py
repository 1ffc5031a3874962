"""The active probe against real small models behind the testbed: an honest replica in another
process agrees with the reference's frozen self-run and passes; the same weights behind
`tool_corruption` fail.

Sized for CPU time (each grammar-constrained call costs about 3 CPU-seconds here): 6 cases whose
call is forced by name, one request at a time so the fault's draws follow a fixed order (fault
seed 3, rate 0.5). At 5% corruption a run needs about 100 calls; that figure comes from
`bench/toolcall_power.py --testbed`, and from the seeded fake-model tests in `test_probe.py`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from probes.base import ProbeContext
from probes.baselines import MemoryBaselines
from probes.client import ProbeClient
from probes.settings import ProbeSettings, ToolCallSettings
from probes.testbed.harness import EndpointSpec, Testbed
from probes.toolcalls.cases import Case, Suite, load_suite
from probes.toolcalls.probe import ToolCallProbe
from tests.probes.fakes import live_clients

CASES = 6
CORRUPTION = {"tool_corruption": {"rate": 0.5}, "seed": 3}
SETTINGS = ProbeSettings(toolcalls=ToolCallSettings(concurrency=1, min_calls=CASES))


def small_suite() -> Suite:
    """Six single calls forced by name, each of another tool (a named choice keeps the grammar small)."""
    suite = load_suite()
    picked: dict[str, Case] = {}
    for case in suite.cases:
        if case.kind in ("single", "nested") and isinstance(case.tool_choice, dict) and case.expected:
            picked.setdefault(case.expected[0].name, case)
    return Suite(suite.version, tuple(list(picked.values())[:CASES]))


@pytest.fixture(scope="module")
def testbed() -> Iterator[Testbed]:
    specs = [
        EndpointSpec("ref", model="smollm2"),
        EndpointSpec("target", model="smollm2", fault=CORRUPTION),
        EndpointSpec("honest-2", model="smollm2", process=1),  # same weights, another process
    ]
    with Testbed(specs) as tb:
        yield tb


def context(client: ProbeClient, reference: ProbeClient, baselines: MemoryBaselines) -> ProbeContext:
    return ProbeContext(
        endpoint=client.endpoint,
        client=client,
        settings=SETTINGS,
        baselines=baselines,
        rng=np.random.default_rng(0),
        clock=lambda: 1_700_000_000.0,
        reference=reference,
    )


async def test_honest_replica_passes_and_corruption_fails(testbed: Testbed) -> None:
    suite = small_suite()
    assert len(suite.cases) == CASES
    urls = {name: testbed.base_url(name) for name in ("ref", "target", "honest-2")}
    baselines = MemoryBaselines()
    async with live_clients(urls) as clients:
        probe = ToolCallProbe(suite)
        honest = await probe.run(context(clients["honest-2"], clients["ref"], baselines))
        details: Any = honest.details
        assert honest.verdict == "pass", details["reasons"]
        assert clients["ref"].requests == len(suite.cases)  # the reference self-run, frozen now
        fig = details["figures"]
        assert fig["schema_accuracy"] == 1.0 and fig["bad"] == 0
        assert fig["f1"] == 1.0 and fig["call_responses"] == CASES  # the same triggers as the reference
        assert details["reference_figures"]["schema_accuracy"] == 1.0

        broken = await probe.run(context(clients["target"], clients["ref"], baselines))
        details = broken.details
        assert clients["ref"].requests == len(suite.cases)  # the frozen reference is reused
        assert broken.verdict == "fail", details
        assert broken.p_value is not None and broken.p_value < 0.01
        assert details["figures"]["bad"] >= 2 and details["bad_cases"]
