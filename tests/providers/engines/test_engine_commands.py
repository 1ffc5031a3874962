import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from providers.engines.commands import (
    ENGINE_KINDS,
    LLAMA_SERVER,
    engine_environment,
    llama_server_path,
    llamacpp_command,
    missing_requirement,
    parse_llamacpp_line,
    sglang_command,
    vllm_command,
)
from providers.engines.config import EngineConfig
from providers.engines.models import SHIPPED_TEMPLATES


def test_llamacpp_command_has_exact_flags() -> None:
    cfg = EngineConfig(served_model_name="smol", n_ctx=2048, n_threads=3, extra_args=("--seed", "7"))
    argv = llamacpp_command(cfg, port=8600, model="/m/smol.gguf", cpu_count=8)
    assert argv == [
        llama_server_path(),
        "--model", "/m/smol.gguf",
        "--alias", "smol",
        "--host", "127.0.0.1",
        "--port", "8600",
        "--ctx-size", "8192",
        "--parallel", "4",
        "--no-kv-unified",
        "--cont-batching",
        "--threads", "3",
        "--threads-batch", "3",
        "--jinja",
        "--metrics",
        "--slots",
        "--no-webui",
        "--offline",
        "--cors-origins", "http://127.0.0.1:8600",
        "--log-jsonl",
        "--log-colors", "off",
        "--chat-template-file", str(SHIPPED_TEMPLATES["smollm2"].path),
        "--cache-prompt", "--cache-ram", "1024",
        "--seed", "7",
    ]
    # Any other GGUF gets its own template.
    assert "--chat-template-file" not in llamacpp_command(cfg.model_copy(update={"model": "/m/x.gguf"}), port=1, model="m", cpu_count=2)


def test_llamacpp_gives_each_slot_n_ctx_and_can_drop_the_prompt_cache() -> None:
    argv = llamacpp_command(EngineConfig(parallel=2, n_ctx=1000, prefix_cache=False), port=1, model="m", cpu_count=2)
    assert argv[argv.index("--ctx-size") + 1] == "2000" and argv[argv.index("--parallel") + 1] == "2"
    assert "--no-cache-prompt" in argv and argv[argv.index("--cache-ram") + 1] == "0"
    assert "--cache-prompt" not in argv


def test_llamacpp_embeddings_engine() -> None:
    cfg = EngineConfig(embeddings=True, pooling="mean", n_ctx=512, parallel=2)
    argv = llamacpp_command(cfg, port=1, model="m.gguf", cpu_count=2)
    i = argv.index("--embeddings")
    assert argv[i : i + 7] == ["--embeddings", "--pooling", "mean", "--batch-size", "512", "--ubatch-size", "512"]
    assert "--cache-ram" not in argv
    assert "--kv-unified" in argv and "--no-kv-unified" not in argv


def test_llamacpp_shares_all_cores_but_one_between_replicas() -> None:
    cfg = EngineConfig(replicas=3)
    argv = llamacpp_command(cfg, port=1, model="m.gguf", cpu_count=8)
    assert argv[argv.index("--threads") + 1] == "2"  # (8 - 1) // 3
    crowded = llamacpp_command(EngineConfig(replicas=4), port=1, model="m", cpu_count=2)
    assert crowded[crowded.index("--threads") + 1] == "1"


def test_llamacpp_log_lines_are_debug_unless_warnings_or_errors() -> None:
    assert parse_llamacpp_line('{"type":"log","time":1,"level":"info","msg":"llama_model_loader: - kv 0\\n"}') == (
        logging.DEBUG, "llama_model_loader: - kv 0",
    )
    assert parse_llamacpp_line('{"type":"log","level":"warn","msg":"slot 0: context shift\\n"}') == (
        logging.WARNING, "slot 0: context shift",
    )
    assert parse_llamacpp_line('{"type":"log","level":"error","msg":"failed to load model"}') == (
        logging.ERROR, "failed to load model",
    )
    assert parse_llamacpp_line('{"type":"log","level":"cont","msg":"."}') == (logging.DEBUG, ".")
    # Routine prompt-cache warnings (every fully cached prompt) are not worth a warning.
    routine = '{"level":"warn","msg":"slot operator(): id  3 | task 17 | n_past was set to 32"}'
    assert parse_llamacpp_line(routine)[0] == logging.DEBUG
    # Not the JSON log format (a stray print, a truncated line): debug, verbatim.
    assert parse_llamacpp_line("main: server is listening") == (logging.DEBUG, "main: server is listening")
    assert parse_llamacpp_line('{"level":"error"}') == (logging.DEBUG, '{"level":"error"}')
    assert parse_llamacpp_line("[1, 2]") == (logging.DEBUG, "[1, 2]")


def test_llama_server_is_the_one_beside_the_interpreter_if_there() -> None:
    beside = os.path.join(os.path.dirname(sys.executable), "llama-server")
    assert llama_server_path() == (beside if os.path.isfile(beside) else "llama-server")


def test_a_missing_llama_server_is_one_line(tmp_path: Path) -> None:
    kind = ENGINE_KINDS["llamacpp"]
    assert missing_requirement(kind, "local", {"PATH": str(tmp_path)}) == (
        "engine local: llama-server is not installed (scripts/install.sh builds it)"
    )
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    assert missing_requirement(kind, "local", {"PATH": str(tmp_path)}) is None


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
    environ = {
        "LLAMA_ARG_PORT": "80", "llama_arg_model": "/other.gguf", "LLAMA_API_KEY": "x", "AIP_MODE": "1",
        "LLAMA_SERVER_SLOTS_DEBUG": "1", "HF_TOKEN": "t", "HOME": "/root", "PATH": "/usr/bin", "PORT": "80",
    }
    env = engine_environment(ENGINE_KINDS["llamacpp"], environ)
    assert set(env) == {"HOME", "PATH", "PYTHONUNBUFFERED"}  # PORT: not on the allow-list
    assert env["PATH"] == os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin"])
    # vLLM reads its own VLLM_* variables and nothing generic; PORT is not an engine's business.
    assert "PORT" not in engine_environment(ENGINE_KINDS["vllm"], environ)
    # ...but not those that would lock the gateway out of it or move its internal port.
    vllm = engine_environment(ENGINE_KINDS["vllm"], {"VLLM_API_KEY": "k", "VLLM_PORT": "1", "VLLM_LOGGING_LEVEL": "INFO"})
    assert "VLLM_API_KEY" not in vllm and "VLLM_PORT" not in vllm and vllm["VLLM_LOGGING_LEVEL"] == "INFO"


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


@pytest.mark.skipif(
    shutil.which(LLAMA_SERVER, path=engine_environment(ENGINE_KINDS["llamacpp"], os.environ)["PATH"]) is None
    and not os.environ.get("CI"),
    reason="llama-server is not built (scripts/install.sh)",
)
def test_settings_env_covers_the_installed_llama_server() -> None:
    # `llama-server --help` names the variable behind every flag ("(env: LLAMA_ARG_CTX_SIZE)").
    env = engine_environment(ENGINE_KINDS["llamacpp"], os.environ)
    help_text = subprocess.run([LLAMA_SERVER, "--help"], env=env, capture_output=True, text=True, timeout=60).stdout
    names = set(re.findall(r"\(env: ([A-Z0-9_]+)\)", help_text))
    assert len(names) > 100 and "LLAMA_ARG_CTX_SIZE" in names and "LLAMA_API_KEY" in names
    environ = dict.fromkeys(names, "1") | {"PATH": "/usr/bin"}
    assert set(engine_environment(ENGINE_KINDS["llamacpp"], environ)) == {"PATH", "PYTHONUNBUFFERED"}
