"""Probe names -> probes, suites of probes, and the confirmatory set that follows an alarm.

Probe modules are imported lazily, on first use, so that a probe whose module is missing (or fails
to import) is a clear `ProbeMissing` naming it, never an import crash of the gateway. A module is
found by the probe's name: the class in it whose `name` equals it (any class name will do).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, cast

from probes.base import Probe

PROBE_MODULES: Mapping[str, str] = MappingProxyType(
    {
        "logprob_drift": "probes.logprob_drift",
        "distribution": "probes.distribution",
        "fidelity": "probes.fidelity",
        "toolcalls": "probes.toolcalls.probe",
        "agent": "probes.agent.probe",
        "sentinels": "probes.sentinels.probe",
    }
)

SUITES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "quality": ("logprob_drift", "distribution", "fidelity"),
        "toolcalls": ("toolcalls",),
        "agent": ("agent",),
        "sentinels": ("sentinels",),
    }
)

# Extra probes for the confirmatory round after an alarm of the key probe (the alarming probe
# itself is always re-run fresh): a drift alarm is confirmed by the distribution test too, and
# both by fidelity, a test of the endpoint against itself: a reference disagreement demotes only
# with such an independent confirmation (probes.policy, "self-history first").
# The round's usage-consistency check (probes.consistency) sends nothing itself: its alarm is
# re-run by the probes that repeat prompts (drift where logprobs are served, distribution on any chat).
# The template check (probes.template_check) is re-run by the runner in every confirmatory round; a
# rendering unlike a same-weights reference's is a disagreement that fidelity can confirm.
CONFIRMED_BY: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"logprob_drift": ("distribution", "fidelity"), "distribution": ("fidelity",),
     "consistency": ("logprob_drift", "distribution"), "template": ("fidelity",)}
)

ProbeFactory = Callable[[], Probe]


class UnknownProbe(ValueError):
    """No probe or suite of that name."""


class ProbeMissing(RuntimeError):
    """The probe is registered but its module is not installed or does not import."""


def _find_probe(module: Any, name: str) -> ProbeFactory:
    for _, obj in inspect.getmembers(module, inspect.isclass):
        if getattr(obj, "name", None) == name and callable(getattr(obj, "run", None)) and obj.__module__ == module.__name__:
            return cast(ProbeFactory, obj)
    raise ProbeMissing(f"probe `{name}`: {module.__name__} defines no probe class with name = {name!r}")


class ProbeRegistry:
    def __init__(
        self,
        factories: Mapping[str, ProbeFactory | str] = PROBE_MODULES,
        *,
        suites: Mapping[str, tuple[str, ...]] = SUITES,
        confirmed_by: Mapping[str, tuple[str, ...]] = CONFIRMED_BY,
    ) -> None:
        """`factories`: name -> a zero-argument factory, or the module path to import it from."""
        self._sources = dict(factories)
        self._factories: dict[str, ProbeFactory] = {}
        self.suites = dict(suites)
        self._confirmed_by = dict(confirmed_by)

    def names(self) -> list[str]:
        return list(self._sources)

    def factory(self, name: str) -> ProbeFactory:
        if name in self._factories:
            return self._factories[name]
        source = self._sources.get(name)
        if source is None:
            raise UnknownProbe(f"unknown probe `{name}`; known: {', '.join(self.names())}")
        if isinstance(source, str):
            try:
                module = importlib.import_module(source)
            except ImportError as exc:
                raise ProbeMissing(f"probe `{name}` is not available: cannot import {source} ({exc})") from None
            factory = _find_probe(module, name)
        else:
            factory = source
        self._factories[name] = factory
        return factory

    def create(self, name: str) -> Probe:
        return self.factory(name)()

    def expand(self, selection: Iterable[str]) -> list[str]:
        """Probe and suite names -> probe names, in order, without repeats; unknown names raise."""
        out: list[str] = []
        for item in selection:
            if item in self.suites:
                names = self.suites[item]
            elif item in self._sources:
                names = (item,)
            else:
                known = ", ".join([*self.suites, *self._sources])
                raise UnknownProbe(f"unknown probe or suite `{item}`; known: {known}")
            out += [n for n in names if n not in out]
        return out

    def confirmatory(self, alarming: Iterable[str]) -> list[str]:
        """The confirmatory round after these probes alarmed: each re-run, plus what confirms it."""
        out: list[str] = []
        for name in alarming:
            for n in (name, *self._confirmed_by.get(name, ())):
                if n in self._sources and n not in out:
                    out.append(n)
        return out
