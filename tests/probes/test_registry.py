"""The probe registry: lazy imports with clear errors, suites, and the confirmatory set."""

from __future__ import annotations

from typing import ClassVar

import pytest

from gateway.catalog import Endpoint
from probes.base import Effect, ProbeContext, ProbeResult
from probes.registry import PROBE_MODULES, SUITES, ProbeMissing, ProbeRegistry, UnknownProbe


class DummyProbe:
    name: ClassVar[str] = "dummy"
    effect: ClassVar[Effect] = "evidence"

    def applicable(self, endpoint: Endpoint) -> str | None:
        return None

    async def run(self, ctx: ProbeContext) -> ProbeResult:
        return ProbeResult(self.name, "pass", 1)


def test_the_quality_suite_and_every_named_probe_are_registered() -> None:
    registry = ProbeRegistry()
    assert SUITES["quality"] == ("logprob_drift", "distribution", "fidelity")
    assert set(registry.names()) == {"logprob_drift", "distribution", "fidelity", "toolcalls", "agent", "sentinels"}
    assert registry.expand(["quality", "fidelity", "toolcalls"]) == ["logprob_drift", "distribution", "fidelity", "toolcalls"]


def test_unknown_names_are_refused() -> None:
    with pytest.raises(UnknownProbe, match="unknown probe or suite `nope`"):
        ProbeRegistry().expand(["quality", "nope"])
    with pytest.raises(UnknownProbe):
        ProbeRegistry().create("nope")


def test_a_probe_class_is_found_by_its_name_and_imported_lazily() -> None:
    registry = ProbeRegistry({"dummy": __name__})
    probe = registry.create("dummy")
    assert isinstance(probe, DummyProbe)
    assert registry.factory("dummy") is DummyProbe


def test_a_missing_module_is_a_clear_error_not_an_import_crash() -> None:
    registry = ProbeRegistry({"ghost": "probes.no_such_probe_module", "empty": "probes.settings"})
    with pytest.raises(ProbeMissing, match="probe `ghost` is not available: cannot import probes.no_such_probe_module"):
        registry.create("ghost")
    with pytest.raises(ProbeMissing, match="defines no probe class"):
        registry.create("empty")


def test_factories_may_be_given_directly() -> None:
    registry = ProbeRegistry({"dummy": DummyProbe}, suites={"mine": ("dummy",)})
    assert registry.expand(["mine"]) == ["dummy"] and isinstance(registry.create("dummy"), DummyProbe)


def test_confirmatory_sets() -> None:
    registry = ProbeRegistry()
    # A reference-grounded alarm is re-run with fidelity, a test of the endpoint against itself.
    assert registry.confirmatory(["logprob_drift"]) == ["logprob_drift", "distribution", "fidelity"]
    assert registry.confirmatory(["fidelity", "logprob_drift"]) == ["fidelity", "logprob_drift", "distribution"]
    assert registry.confirmatory(["distribution"]) == ["distribution", "fidelity"]
    assert registry.confirmatory(["sentinels"]) == ["sentinels"]
    assert registry.confirmatory(["gone"]) == []  # an alarm from a probe not registered here (a monitor)
    assert all(path.startswith("probes.") for path in PROBE_MODULES.values())
