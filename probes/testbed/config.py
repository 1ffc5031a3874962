"""The testbed's YAML config (`deploy/testbed.yaml`) and the gateway config that points at it.

    n_ctx: 2048
    threads: 1
    gateway_model: smollm2          # the model name the gateway's deployments expose
    endpoints:
      - {name: honest, model: smollm2, process: 0}
      - {name: swapped, model: smollm2, fault: {substitute: gemma3-270m}}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from probes.testbed.endpoints import EndpointSpec
from probes.testbed.faults import FaultSpecError, parse_fault


class TestbedConfigError(ValueError):
    """A config that cannot be served; the message is one line."""

    __test__ = False


class _Endpoint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    model: str = "smollm2"
    process: int = Field(0, ge=0)
    fault: dict[str, Any] = Field(default_factory=dict)


class TestbedConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    __test__ = False

    endpoints: tuple[_Endpoint, ...] = Field(min_length=1)
    n_ctx: int = Field(2048, ge=256)
    threads: int = Field(1, ge=1)
    startup_timeout: float = Field(300.0, gt=0)
    gateway_model: str = Field("smollm2", min_length=1)

    def specs(self) -> list[EndpointSpec]:
        return [EndpointSpec(e.name, e.model, e.process, e.fault) for e in self.endpoints]


def load_testbed_config(path: str | Path) -> TestbedConfig:
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise TestbedConfigError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise TestbedConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    return parse_testbed_config(raw, str(path))


def parse_testbed_config(raw: object, source: str = "testbed config") -> TestbedConfig:
    if not isinstance(raw, Mapping):
        raise TestbedConfigError(f"{source}: must be a mapping with an 'endpoints' list")
    try:
        config = TestbedConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise TestbedConfigError(f"{source}: {where}: {first['msg']}") from None
    names = [e.name for e in config.endpoints]
    if len(set(names)) != len(names):
        raise TestbedConfigError(f"{source}: endpoint names must be distinct")
    for i, e in enumerate(config.endpoints):
        try:
            EndpointSpec(e.name, e.model, e.process, e.fault)
            parse_fault(e.fault)
        except (ValueError, FaultSpecError) as exc:
            raise TestbedConfigError(f"{source}: endpoints.{i}: {exc}") from None
    return config


def gateway_config(config: TestbedConfig, base_url: Callable[[str], str]) -> dict[str, Any]:
    """`providers` and `deployments` for `gwctl serve`: one provider per testbed endpoint, all
    deployments of `config.gateway_model`, so the gateway routes and probes across them."""
    providers, deployments = [], []
    for e in config.endpoints:
        provider = f"testbed-{e.name}"
        providers.append({"name": provider, "kind": "openai", "base_url": base_url(e.name), "region": "local"})
        deployments.append(
            {
                "model": config.gateway_model,
                "provider": provider,
                "upstream_model": e.model,
                "id": f"testbed/{e.name}",
                "context_window": config.n_ctx,
                # The testbed serves n=1 only: the gateway fans out larger n itself.
                "capabilities": {"tools": True, "logprobs": True, "max_top_logprobs": 20, "native_n": False},
            }
        )
    return {"providers": providers, "deployments": deployments}


def gateway_config_yaml(config: TestbedConfig, base_url: Callable[[str], str]) -> str:
    text: str = yaml.safe_dump(gateway_config(config, base_url), sort_keys=False)
    return text
