"""A task: what the model is told, which file it must write, and the checks that grade it.

The checks live as Python files in `probes.agent.tasks.checks` and run only in the judge's sandbox,
never in the solution's (`probes.agent.judge`): `<name>_visible.py` is what the model's `run_tests`
tool runs, `<name>_hidden.py` is what grades it and is never shown to the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources

from probes.agent.sandbox import Limits

CHECKS_PACKAGE = "probes.agent.tasks.checks"


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    filename: str
    prompt: str
    # Bare names the solution must not call (`eval` in an expression evaluator), modules it must
    # not import (`configparser` in an INI parser).
    forbidden_calls: frozenset[str] = frozenset()
    forbidden_imports: frozenset[str] = frozenset()
    limits: Limits = field(default_factory=lambda: Limits(wall_seconds=15.0, cpu_seconds=10))

    @property
    def module(self) -> str:
        return self.filename.removesuffix(".py")

    def checks_source(self, kind: str) -> str:
        """The `hidden` or `visible` checks' source text."""
        if kind not in ("hidden", "visible"):
            raise ValueError(f"unknown checks kind {kind!r}")
        return resources.files(CHECKS_PACKAGE).joinpath(f"{self.name}_{kind}.py").read_text()
