"""`providers.engines.preflight`: what `gwctl serve` refuses before starting anything (no engine needed)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from gateway.config import Settings, load_config
from providers.engines.commands import ENGINE_KINDS
from providers.engines.config import EngineConfig
from providers.engines.preflight import engine_problem, startup_problem


def never(host: str, port: int) -> bool:
    return False


def busy(*ports: int) -> Callable[[str, int], bool]:
    return lambda host, port: port in ports


def settings(port: int = 8080, **engine: object) -> Settings:
    return load_config(environ={}, server={"port": port}, engines=[engine])


def test_a_model_path_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    assert engine_problem(EngineConfig(model=str(missing)), in_use=never) == f"engine local: model file {missing} not found"


def test_an_unknown_alias() -> None:
    problem = engine_problem(EngineConfig(name="e", model="llama-70b"), in_use=never)
    assert problem is not None and problem.startswith("engine e: unknown model 'llama-70b'")


def test_an_existing_gguf_path_and_the_shipped_model_pass(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    assert engine_problem(EngineConfig(model=str(model)), in_use=never) is None
    assert engine_problem(EngineConfig(), in_use=never) is None


def test_an_engine_port_in_use() -> None:
    cfg = EngineConfig(replicas=3, base_port=9100)
    assert engine_problem(cfg, in_use=busy(9102)) == "engine local: port 9102 is already in use"
    assert engine_problem(cfg, in_use=busy(9103)) is None
    assert engine_problem(EngineConfig(), in_use=lambda h, p: True) is None  # base_port 0: free ports are picked


def test_the_gateway_port_in_use_or_claimed_by_an_engine() -> None:
    assert startup_problem(settings(8080), in_use=busy(8080)) == "server port 8080 on 127.0.0.1 is already in use"
    assert startup_problem(settings(9101, base_port=9100, replicas=2), in_use=never) == (
        "engine local: port 9101 is the gateway's own port (server.port)"
    )
    assert startup_problem(settings(9102, base_port=9100, replicas=2), in_use=never) is None


def test_a_missing_engine_module() -> None:
    kinds = dict(ENGINE_KINDS) | {"vllm": replace(ENGINE_KINDS["vllm"], python_module="no_such_module_for_tests")}
    problem = engine_problem(EngineConfig(kind="vllm", model="org/model"), in_use=never, kinds=kinds)
    assert problem == "engine local: Python module no_such_module_for_tests is not installed"


def test_an_external_engine_is_not_ours_to_check() -> None:
    assert engine_problem(EngineConfig(kind="external", url="http://127.0.0.1:1/v1"), in_use=lambda h, p: True) is None
