"""Engine kinds: how to launch each one, as pure functions of the config.

A builder turns `EngineConfig` plus one replica's port and resolved model into an argv list.
`ENGINE_KINDS` maps `EngineConfig.kind` to its builder and the facts the supervisor needs
(which Python module must be importable, which path says the server is alive, which environment
variables the engine would silently read as settings).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gateway.config import EngineConfig

# The most logprobs the gateway ever asks for (OpenAI's top_logprobs limit).
MAX_TOP_LOGPROBS = 20
# Real bytes of llama.cpp's prefix cache per replica (our server entry point counts every byte).
# Not in EngineConfig yet; `extra_args` can override it, since a later flag wins.
LLAMACPP_PREFIX_CACHE_BYTES = 1 << 30

CommandBuilder = Callable[..., list[str]]


@dataclass(frozen=True)
class EngineKind:
    build: CommandBuilder
    # Importable in the gateway's interpreter, else the engine cannot start (checked before spawning).
    python_module: str
    # A GET that answers 200 while the server is alive, even while it is busy generating.
    liveness_path: str
    # Environment variables (lower-case names) that the engine reads as settings; removed from its env.
    settings_env: frozenset[str] = frozenset()


def llamacpp_command(cfg: EngineConfig, *, port: int, model: str, cpu_count: int) -> list[str]:
    # Leave one core to the gateway: measured on 2 cores under load, 2 engine threads decoded
    # 2 tok/s (spinning OpenMP threads fight for the cores) where 1 thread decoded 31-34 tok/s.
    threads = cfg.n_threads or max(1, (cpu_count - 1) // cfg.replicas)
    argv = [
        # llama_cpp.server with AMX weight buffers off and an honest cache size; see llamacpp_server.py.
        sys.executable, "-m", "providers.engines.llamacpp_server",
        "--model", model,
        "--model_alias", cfg.served_model_name,
        "--host", cfg.host,
        "--port", str(port),
        "--chat_format", cfg.chat_format,
        "--n_ctx", str(cfg.n_ctx),
        "--n_threads", str(threads),
        "--n_threads_batch", str(threads),
        # Otherwise any new request (even GET /v1/models) cuts a running stream short.
        "--interrupt_requests", "False",
        # Logprobs need logits for every position; the server's default, pinned here.
        "--logits_all", "True",
    ]
    if cfg.prefix_cache:
        argv += ["--cache", "True", "--cache_type", "ram", "--cache_size", str(LLAMACPP_PREFIX_CACHE_BYTES)]
    return argv + list(cfg.extra_args)


def vllm_command(cfg: EngineConfig, *, port: int, model: str, cpu_count: int) -> list[str]:
    argv = [
        "vllm", "serve", model,
        "--host", cfg.host,
        "--port", str(port),
        "--served-model-name", cfg.served_model_name,
        "--tensor-parallel-size", str(cfg.tensor_parallel_size),
        "--max-model-len", str(cfg.n_ctx),
        "--enable-prefix-caching" if cfg.prefix_cache else "--no-enable-prefix-caching",
        # Reports usage.prompt_tokens_details.cached_tokens, which cost accounting needs.
        "--enable-prompt-tokens-details",
        "--max-logprobs", str(MAX_TOP_LOGPROBS),
    ]
    if cfg.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", str(cfg.gpu_memory_utilization)]
    return argv + list(cfg.extra_args)


def sglang_command(cfg: EngineConfig, *, port: int, model: str, cpu_count: int) -> list[str]:
    argv = [
        sys.executable, "-m", "sglang.launch_server",
        "--model-path", model,
        "--host", cfg.host,
        "--port", str(port),
        "--served-model-name", cfg.served_model_name,
        "--tp-size", str(cfg.tensor_parallel_size),
        "--context-length", str(cfg.n_ctx),
        # Reports usage.prompt_tokens_details.cached_tokens.
        "--enable-cache-report",
    ]
    if not cfg.prefix_cache:
        argv.append("--disable-radix-cache")
    if cfg.gpu_memory_utilization is not None:
        argv += ["--mem-fraction-static", str(cfg.gpu_memory_utilization)]
    return argv + list(cfg.extra_args)


# llama_cpp.server reads every unset setting from an environment variable of the same name
# (pydantic-settings, case-insensitive), and uvicorn.run there prefers $HOST/$PORT over --host/--port,
# so a gateway started with PORT=... or API_KEY=... would move or lock its engine. Checked against
# the installed version by the tests.
LLAMACPP_SETTINGS_ENV = frozenset({
    "api_key", "cache", "cache_size", "cache_type", "chat_format", "chat_template_kwargs",
    "clip_model_path", "config_file", "disable_ping_events", "draft_model",
    "draft_model_num_pred_tokens", "embedding", "flash_attn", "hf_model_repo_id",
    "hf_pretrained_model_name_or_path", "hf_tokenizer_config_path", "host", "interrupt_requests",
    "kv_overrides", "last_n_tokens_size", "logits_all", "lora_base", "lora_path", "main_gpu", "model",
    "model_alias", "models", "mul_mat_q", "n_batch", "n_ctx", "n_gpu_layers", "n_threads",
    "n_threads_batch", "n_ubatch", "numa", "offload_kqv", "port", "root_path", "rope_freq_base",
    "rope_freq_scale", "rope_scaling_type", "rpc_servers", "seed", "split_mode", "ssl_certfile",
    "ssl_keyfile", "tensor_split", "type_k", "type_v", "use_mlock", "use_mmap", "verbose",
    "vocab_only", "yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow", "yarn_ext_factor",
    "yarn_orig_ctx",
})

ENGINE_KINDS: Mapping[str, EngineKind] = MappingProxyType({
    # /v1/models takes the model lock in llama_cpp.server, so it stalls behind a long generation;
    # /openapi.json is served by FastAPI without it.
    "llamacpp": EngineKind(llamacpp_command, "llama_cpp", "/openapi.json", LLAMACPP_SETTINGS_ENV),
    "vllm": EngineKind(vllm_command, "vllm", "/health"),
    "sglang": EngineKind(sglang_command, "sglang", "/health"),
})


# What an engine may inherit: the basics of a process, and its own runtime's settings (GPU, threads,
# caches). Nothing else: the gateway's environment holds provider keys and the admin key.
ENGINE_ENV_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
    "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "XDG_CACHE_HOME",
})  # fmt: skip
ENGINE_ENV_PREFIXES = (
    "LC_", "CUDA_", "NVIDIA_", "HIP_", "ROCR_", "HSA_", "NCCL_", "OMP_", "MKL_", "KMP_", "OPENBLAS_",
    "GGML_", "VLLM_", "SGLANG_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TORCH", "PYTORCH_", "TRITON_",
)  # fmt: skip


def engine_environment(kind: EngineKind, environ: Mapping[str, str]) -> dict[str, str]:
    """The child's environment: an explicit, minimal one (see ENGINE_ENV_NAMES), minus what the
    engine would misread as settings."""
    env = {
        k: v
        for k, v in environ.items()
        if (k in ENGINE_ENV_NAMES or k.startswith(ENGINE_ENV_PREFIXES)) and k.lower() not in kind.settings_env
    }
    # Engine output goes through a pipe; unbuffered keeps log lines timely and in order.
    env["PYTHONUNBUFFERED"] = "1"
    # Console scripts such as `vllm` live beside the interpreter, which may not be on PATH.
    bin_dir = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join(p for p in (bin_dir, environ.get("PATH", "")) if p)
    return env
