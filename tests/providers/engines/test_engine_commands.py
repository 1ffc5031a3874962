import importlib.util
import os
import sys

import pytest

from gateway.config import EngineConfig
from providers.engines.commands import (
    ENGINE_KINDS,
    LLAMACPP_SETTINGS_ENV,
    engine_environment,
    llamacpp_command,
    sglang_command,
    vllm_command,
)


def test_llamacpp_command_has_exact_flags() -> None:
    cfg = EngineConfig(served_model_name="smol", n_ctx=2048, n_threads=3, extra_args=("--seed", "7"))
    argv = llamacpp_command(cfg, port=8600, model="/m/smol.gguf", cpu_count=8)
    assert argv == [
        sys.executable, "-m", "providers.engines.llamacpp_server",
        "--model", "/m/smol.gguf",
        "--model_alias", "smol",
        "--host", "127.0.0.1",
        "--port", "8600",
        "--chat_format", "chatml-function-calling",
        "--n_ctx", "2048",
        "--n_threads", "3",
        "--n_threads_batch", "3",
        "--interrupt_requests", "False",
        "--logits_all", "True",
        "--cache", "True", "--cache_type", "ram", "--cache_size", str(1 << 30),
        "--seed", "7",
    ]


def test_llamacpp_shares_all_cores_but_one_between_replicas_and_can_drop_the_cache() -> None:
    cfg = EngineConfig(replicas=3, prefix_cache=False)
    argv = llamacpp_command(cfg, port=1, model="m.gguf", cpu_count=8)
    assert argv[argv.index("--n_threads") + 1] == "2"  # (8 - 1) // 3
    assert "--cache" not in argv
    crowded = llamacpp_command(EngineConfig(replicas=4), port=1, model="m", cpu_count=2)
    assert crowded[crowded.index("--n_threads") + 1] == "1"


def test_vllm_command_has_exact_flags() -> None:
    cfg = EngineConfig(
        kind="vllm", model="Qwen/Qwen2.5-0.5B-Instruct", served_model_name="qwen",
        tensor_parallel_size=2, gpu_memory_utilization=0.8, n_ctx=8192, extra_args=("--dtype", "half"),
    )
    assert vllm_command(cfg, port=9000, model=cfg.model, cpu_count=8) == [
        "vllm", "serve", "Qwen/Qwen2.5-0.5B-Instruct",
        "--host", "127.0.0.1",
        "--port", "9000",
        "--served-model-name", "qwen",
        "--tensor-parallel-size", "2",
        "--max-model-len", "8192",
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--max-logprobs", "20",
        "--gpu-memory-utilization", "0.8",
        "--dtype", "half",
    ]
    no_cache = vllm_command(cfg.model_copy(update={"prefix_cache": False}), port=1, model="m", cpu_count=1)
    assert "--no-enable-prefix-caching" in no_cache and "--enable-prefix-caching" not in no_cache


def test_sglang_command_has_exact_flags() -> None:
    cfg = EngineConfig(kind="sglang", model="/models/qwen", served_model_name="qwen", prefix_cache=False)
    assert sglang_command(cfg, port=30000, model=cfg.model, cpu_count=8) == [
        sys.executable, "-m", "sglang.launch_server",
        "--model-path", "/models/qwen",
        "--host", "127.0.0.1",
        "--port", "30000",
        "--served-model-name", "qwen",
        "--tp-size", "1",
        "--context-length", "4096",
        "--enable-cache-report",
        "--disable-radix-cache",
    ]
    cached = cfg.model_copy(update={"prefix_cache": True, "gpu_memory_utilization": 0.5})
    argv = sglang_command(cached, port=1, model="m", cpu_count=1)
    assert "--disable-radix-cache" not in argv
    assert argv[-2:] == ["--mem-fraction-static", "0.5"]


def test_every_process_kind_is_registered() -> None:
    assert set(ENGINE_KINDS) == {"llamacpp", "vllm", "sglang"}


def test_engine_environment_drops_what_llamacpp_would_read_as_settings() -> None:
    environ = {"PORT": "80", "api_key": "x", "Model": "/other.gguf", "HOME": "/root", "PATH": "/usr/bin"}
    env = engine_environment(ENGINE_KINDS["llamacpp"], environ)
    assert "PORT" not in env and "api_key" not in env and "Model" not in env
    assert env["HOME"] == "/root"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["PATH"] == os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin"])
    # vLLM reads its own VLLM_* variables and nothing generic; PORT is not an engine's business.
    assert "PORT" not in engine_environment(ENGINE_KINDS["vllm"], environ)


@pytest.mark.parametrize("kind", ["llamacpp", "vllm", "sglang"])
def test_engines_get_an_explicit_minimal_environment_without_the_gateway_s_secrets(kind: str) -> None:
    environ = {
        "GW_AUTH__ADMIN_KEY": "sk-admin-secret-0001",
        "GW_DATABASE__URL": "postgresql://gw:pw@db/gw",
        "TOGETHER_API_KEY": "tg-secret",
        "OPENAI_API_KEY": "sk-openai-secret",
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "CUDA_VISIBLE_DEVICES": "0",
        "HF_HOME": "/cache/hf",
        "OMP_NUM_THREADS": "2",
        "PATH": "/usr/bin",
    }
    env = engine_environment(ENGINE_KINDS[kind], environ)
    assert not any("secret" in v or "pw@" in v for v in env.values())
    assert {"GW_AUTH__ADMIN_KEY", "GW_DATABASE__URL", "TOGETHER_API_KEY", "OPENAI_API_KEY"}.isdisjoint(env)
    assert {k: env[k] for k in ("HOME", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "HF_HOME", "OMP_NUM_THREADS")} == {
        k: environ[k] for k in ("HOME", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "HF_HOME", "OMP_NUM_THREADS")
    }


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed")
def test_settings_env_covers_the_installed_llamacpp_server() -> None:
    from llama_cpp.server.settings import ConfigFileSettings, Settings

    fields = set(Settings.model_fields) | set(ConfigFileSettings.model_fields)
    assert fields - LLAMACPP_SETTINGS_ENV == set()
