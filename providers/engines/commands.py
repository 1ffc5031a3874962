"""Engine kinds: how to launch each one, as pure functions of the config.

A builder turns `EngineConfig` plus one replica's port and resolved model into an argv list.
`ENGINE_KINDS` maps `EngineConfig.kind` to its builder and the facts the supervisor needs
(which Python module or executable must be there, which path says the server is alive, which
environment variables the engine would silently read as settings, how to read its output).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import httpx
import orjson

from providers.engines.config import EngineConfig
from providers.engines.load import EngineLoad, read_load
from providers.engines.models import chat_template

# The most logprobs the gateway ever asks for (OpenAI's top_logprobs limit).
MAX_TOP_LOGPROBS = 20
# RAM for llama-server's prompt cache per replica (older prefixes saved out of the slots), in MiB.
# Not in EngineConfig yet; `extra_args` can override it, since a later flag wins.
LLAMACPP_PROMPT_CACHE_MIB = 1024
# The executable scripts/install.sh builds (and links beside the interpreter).
LLAMA_SERVER = "llama-server"

CommandBuilder = Callable[..., list[str]]
LoadReader = Callable[[httpx.AsyncClient, str, float], Awaitable[EngineLoad]]


@dataclass(frozen=True)
class EngineKind:
    build: CommandBuilder
    # Importable in the gateway's interpreter, else the engine cannot start (checked before spawning).
    python_module: str
    # A GET that answers 200 while the server is alive, even while it is busy generating.
    liveness_path: str
    # Environment variables (lower-case names, or name prefixes) that the engine reads as settings;
    # removed from its env.
    settings_env: frozenset[str] = frozenset()
    settings_env_prefixes: tuple[str, ...] = ()
    # An executable that must be on the engine's PATH (checked before spawning); "" for none.
    executable: str = ""
    # Turns one line of the engine's output into (logging level, text); None: the line as it is.
    parse_output: Callable[[str], tuple[int, str]] | None = None
    # Reads how loaded a replica is from the engine itself (client, root URL, now); None: it cannot say.
    read_load: LoadReader | None = None


def llamacpp_command(cfg: EngineConfig, *, port: int, model: str, cpu_count: int) -> list[str]:
    # Leave one core to the gateway: measured on 2 cores under load, 2 engine threads decoded
    # 2 tok/s (spinning OpenMP threads fight for the cores) where 1 thread decoded 31-34 tok/s.
    threads = cfg.n_threads or max(1, (cpu_count - 1) // cfg.replicas)
    argv = [
        llama_server_path(),
        "--model", model,
        "--alias", cfg.served_model_name,
        "--host", cfg.host,
        "--port", str(port),
        # n_ctx for each of `parallel` slots, decoded together (continuous batching).
        "--ctx-size", str(cfg.n_ctx * cfg.parallel),
        "--parallel", str(cfg.parallel),
        # One KV buffer per slot: a prompt decodes to the same tokens alone or batched with others
        # (measured: greedy outputs differ under --kv-unified). Embeddings need the unified buffer:
        # with one per slot, two different inputs batched together change each other's vectors.
        "--kv-unified" if cfg.embeddings else "--no-kv-unified",
        "--cont-batching",
        "--threads", str(threads),
        "--threads-batch", str(threads),
        # The chat template (and tool-call format) stored in the GGUF, as every other engine applies it.
        "--jinja",
        "--metrics",
        "--slots",
        "--no-webui",
        "--offline",
        # Its own origin only: no web page may read its answers (it has no key; the gateway is its client).
        "--cors-origins", f"http://{cfg.host}:{port}",
        # One JSON object per line with its level: the gateway logs info at debug (see parse_llamacpp_line).
        "--log-jsonl",
        "--log-colors", "off",
    ]
    template = chat_template(cfg)
    if template is not None and not cfg.embeddings:
        argv += ["--chat-template-file", str(template.path)]
    if cfg.embeddings:
        # Pooling needs a whole input in one physical batch: let that be a whole context.
        argv += ["--embeddings", "--pooling", cfg.pooling, "--batch-size", str(cfg.n_ctx), "--ubatch-size", str(cfg.n_ctx)]
    elif cfg.prefix_cache:
        argv += ["--cache-prompt", "--cache-ram", str(LLAMACPP_PROMPT_CACHE_MIB)]
    else:
        argv += ["--no-cache-prompt", "--cache-ram", "0"]
    return argv + list(cfg.extra_args)


def llama_server_path() -> str:
    """The llama-server beside the interpreter (where install.sh links it), else the name for PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), LLAMA_SERVER)
    return beside if os.path.isfile(beside) else LLAMA_SERVER


# llama-server's log levels (common/log.cpp) -> logging levels. "info" is the metadata dump and
# per-request chatter: debug for the gateway. "cont" continues the entry before it.
_LLAMACPP_LEVELS: Mapping[str, int] = {
    "debug": logging.DEBUG, "info": logging.DEBUG, "cont": logging.DEBUG, "none": logging.DEBUG,
    "warn": logging.WARNING, "error": logging.ERROR,
}


# Warnings llama-server gives for routine prompt-cache work (a prompt it holds in full is still
# evaluated from its last token): debug, like the rest of its per-request chatter.
_ROUTINE_WARNINGS = ("need to evaluate at least 1 token", "n_past was set to")


def parse_llamacpp_line(line: str) -> tuple[int, str]:
    """One `--log-jsonl` line -> (level, message); anything else (a stray print) is debug as it is."""
    try:
        entry = orjson.loads(line)
    except orjson.JSONDecodeError:
        return logging.DEBUG, line
    if not isinstance(entry, dict) or not isinstance(entry.get("msg"), str):
        return logging.DEBUG, line
    message = entry["msg"].strip()
    level = _LLAMACPP_LEVELS.get(str(entry.get("level")), logging.DEBUG)
    if level == logging.WARNING and any(routine in message for routine in _ROUTINE_WARNINGS):
        level = logging.DEBUG
    return level, message


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


# llama-server reads LLAMA_ARG_<FLAG> for every flag it has, and a few other variables (an API key,
# Google Cloud's AIP_* routes and port, slot debugging), so a gateway started with LLAMA_API_KEY=...
# or AIP_MODE=... would lock or move its engine. Checked against the vendored source by the tests.
LLAMACPP_SETTINGS_ENV = frozenset({
    "llama_api_key", "hf_token", "mtmd_backend_device", "llama_app_cmd", "llama_media_marker",
    "llama_trace", "llamacpp_test_modelfile",
})
LLAMACPP_SETTINGS_ENV_PREFIXES = ("llama_arg_", "llama_server_", "aip_")

ENGINE_KINDS: Mapping[str, EngineKind] = MappingProxyType({
    # /health answers from the HTTP thread while the slots generate (never logged by the server).
    "llamacpp": EngineKind(
        llamacpp_command, "", "/health", LLAMACPP_SETTINGS_ENV, LLAMACPP_SETTINGS_ENV_PREFIXES,
        executable=LLAMA_SERVER, parse_output=parse_llamacpp_line, read_load=read_load,
    ),
    # VLLM_API_KEY would lock the gateway out of its own engine; VLLM_PORT is vLLM's internal port.
    "vllm": EngineKind(vllm_command, "vllm", "/health", frozenset({"vllm_api_key", "vllm_port"})),
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
        if (k in ENGINE_ENV_NAMES or k.startswith(ENGINE_ENV_PREFIXES))
        and k.lower() not in kind.settings_env
        and not k.lower().startswith(kind.settings_env_prefixes)
    }
    # Engine output goes through a pipe; unbuffered keeps log lines timely and in order.
    env["PYTHONUNBUFFERED"] = "1"
    # Console scripts such as `vllm`, and llama-server, live beside the interpreter, which may not be on PATH.
    bin_dir = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join(p for p in (bin_dir, environ.get("PATH", "")) if p)
    return env


def missing_requirement(kind: EngineKind, engine: str, env: Mapping[str, str]) -> str | None:
    """What the engine needs and this machine lacks, as one line; None when nothing is missing."""
    if kind.python_module and importlib.util.find_spec(kind.python_module) is None:
        return f"engine {engine}: Python module {kind.python_module} is not installed"
    if kind.executable and shutil.which(kind.executable, path=env.get("PATH")) is None:
        return f"engine {engine}: {kind.executable} is not installed (scripts/install.sh builds it)"
    return None
