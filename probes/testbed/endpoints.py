"""What one testbed endpoint is: a name, the model it claims to serve, its process and its fault."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from probes.testbed.faults import FaultSpec, parse_fault

# What a server prints on stdout, followed by its base URL, once it serves.
READY_LINE = "TESTBED READY"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


@dataclass(frozen=True)
class EndpointSpec:
    """An endpoint served at `/{name}/v1`. `model` is a shipped alias or a .gguf path; endpoints
    with the same `process` index share one server process (and its loaded models)."""

    name: str
    model: str = "smollm2"
    process: int = 0
    fault: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name) or self.name.startswith("_"):
            raise ValueError(f"endpoint name {self.name!r}: use letters, digits, '.', '_' or '-'")
        if self.process < 0:
            raise ValueError(f"endpoint {self.name}: process must be >= 0")

    def fault_spec(self) -> FaultSpec:
        return parse_fault(dict(self.fault))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "process": self.process, "fault": dict(self.fault)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> EndpointSpec:
        return cls(
            name=raw["name"], model=raw.get("model", "smollm2"), process=raw.get("process", 0), fault=raw.get("fault") or {}
        )
