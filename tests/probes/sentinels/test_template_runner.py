"""Through the runner: an honest endpoint whose own chat template adds a default system prompt
(24 prompt tokens more than the reference's rendering) is not made suspect by the usage sentinel:
the audit-start check says "template differs", and the sentinel judges the endpoint against its
own counts instead of the reference's."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from gateway.health_states import HealthStates
from gateway.routing.tokens import TokenCounter
from gateway.state_store.memory import MemoryStore
from probes.baselines import MemoryBaselines
from probes.evidence import EvidenceStore
from probes.registry import ProbeRegistry
from probes.runner import ProbeRunner
from probes.sentinels.probe import SentinelsProbe
from probes.settings import ProbeSettings
from tests.fakes.catalog import make_catalog, make_endpoint
from tests.fakes.clock import FakeClock
from tests.probes.fakes import FakeProbeClient
from tests.probes.sentinels.fake_lm import FakeLM


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


def endpoint(endpoint_id: str) -> Any:
    ep = make_endpoint(endpoint_id, "m")
    return dataclasses.replace(ep, deployment=ep.deployment.model_copy(update={"context_window": 2048}))


@pytest.mark.parametrize("template_check", [True, False])
async def test_another_template_is_reported_not_judged_as_a_usage_fault(counter: TokenCounter, template_check: bool) -> None:
    ep, ref = endpoint("prov/m"), endpoint("local/m")
    models = {ep.id: FakeLM(counter=counter, overhead=7 + 24), ref.id: FakeLM(counter=counter, overhead=7)}
    clock = FakeClock(start=1_700_000_000.0)
    runner = ProbeRunner(
        catalog=make_catalog(ep, ref), health=HealthStates(),
        settings=ProbeSettings(references={"m": ref.id}, seed=1, template_check=template_check),
        registry=ProbeRegistry({"sentinels": lambda: SentinelsProbe(counter=counter)}),
        evidence=EvidenceStore(MemoryStore(clock)), baselines=MemoryBaselines(),
        client_factory=lambda e: FakeProbeClient(e, models[e.id]),  # type: ignore[arg-type,return-value]
        wall=clock, rng=np.random.default_rng(1),
    )
    report = await runner.run(ep.id, ["sentinels"], trigger="manual")
    result, consistency = report.rounds[0].results
    # The endpoint counts its own repeated prompts alike, whatever its template: no consistency fault.
    assert (consistency.probe, consistency.verdict) == ("consistency", "pass")
    details: Any = result.details
    if not template_check:  # what the audit did before: the reference's counts, and a false alarm
        assert "usage_comparison:mismatch" in details["findings"]
        return
    assert report.template is not None and report.template.status == "differs"
    assert details["reference"] is None and "template differs" in details["reference_skipped"]
    assert result.verdict == "pass", details["findings"]
    assert report.state == "healthy"
