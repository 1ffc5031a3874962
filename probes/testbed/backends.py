"""Models the testbed serves in-process with llama.cpp: file resolution, re-quantization, loading.

`ModelFiles` turns an alias ("smollm2", "gemma3-270m") or a path into a GGUF file, and
`quantize` writes a re-quantized copy into a cache keyed by the source's hash and the type.
`ModelPool` loads each file once and pairs it with a lock: one llama.cpp context serves one
request at a time, and callers run it in a worker thread so the server stays responsive.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import re
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from providers.engines.errors import EngineStartError
from providers.engines.models import SHIPPED_MODELS, default_cache_dir

_CHUNK = 1024 * 1024


class ModelError(Exception):
    """A model that cannot be found, quantized or loaded; the message is one line."""


def llama_cpp_missing() -> str | None:
    """Why the testbed cannot run in this interpreter, or None when it can.

    llama-cpp-python is the `testbed` extra, not a dependency: serving never imports it, and it
    compiles for minutes, so a plain install (scripts/install.sh) does not have it.
    """
    if importlib.util.find_spec("llama_cpp") is not None:
        return None
    return (
        "the testbed needs llama-cpp-python, which a plain install leaves out: "
        "GW_EXTRAS=testbed bash scripts/install.sh (or pip install -e '.[testbed]')"
    )


def quantized_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    return default_cache_dir(environ) / "testbed"


class ModelFiles:
    """Alias or path -> GGUF file; re-quantized copies live in `cache_dir`."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir

    def resolve(self, model: str) -> Path:
        shipped = SHIPPED_MODELS.get(model)
        if shipped is not None:
            try:
                # Shipped files that need assembling go to the gateway's own cache, shared with it.
                return shipped("testbed", self.cache_dir.parent)
            except EngineStartError as exc:
                raise ModelError(exc.message) from None
        path = Path(model).expanduser()
        if path.suffix == ".gguf" and path.is_file():
            return path
        known = ", ".join(sorted(SHIPPED_MODELS))
        raise ModelError(f"unknown model {model!r}: use a shipped alias ({known}) or an existing .gguf path")

    def quantized(self, source: Path, qtype: str) -> Path:
        return quantize(source, qtype, self.cache_dir)

    def quantized_tensors(self, source: Path, pattern: str, qtype: str) -> Path:
        return quantize_tensors(source, pattern, qtype, self.cache_dir)


def quantize(source: Path, qtype: str, cache_dir: Path) -> Path:
    """A copy of `source` re-quantized to `qtype` (e.g. "Q2_K"), made once and cached."""
    import llama_cpp

    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype}", None)
    if ftype is None:
        raise ModelError(f"unknown quantization type {qtype!r}")
    target = cache_dir / f"{source.stem}.{_sha256(source)[:16]}.{qtype}.gguf"
    if target.is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Written beside the target and renamed, so a concurrent process never loads half a file.
    fd, partial = tempfile.mkstemp(dir=cache_dir, prefix=target.name, suffix=".part")
    os.close(fd)
    os.chmod(partial, 0o644)
    try:
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ftype
        params.allow_requantize = True
        params.nthread = min(2, os.cpu_count() or 1)
        rc = llama_cpp.llama_model_quantize(str(source).encode(), partial.encode(), ctypes.byref(params))
        if rc != 0:
            raise ModelError(f"quantizing {source.name} to {qtype} failed (llama.cpp returned {rc})")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


def quantize_tensors(source: Path, pattern: str, qtype: str, cache_dir: Path) -> Path:
    """A copy of `source` in which only the tensors whose names match `pattern` (re.search) are
    re-quantized to the ggml type `qtype`; every other tensor is copied byte for byte, which is
    checked after writing (llama.cpp's type rules would otherwise re-pick some). Made once, cached."""
    import llama_cpp

    gtype = getattr(llama_cpp, f"GGML_TYPE_{qtype}", None)
    if gtype is None:
        raise ModelError(f"unknown tensor type {qtype!r}")
    key = hashlib.sha256(f"{pattern}\0{qtype}".encode()).hexdigest()[:12]
    target = cache_dir / f"{source.stem}.{_sha256(source)[:16]}.tensors-{key}.gguf"
    if target.is_file():
        return target
    before = _tensor_layout(source)
    matched = sorted(name for name in before if re.search(pattern, name))
    if not matched:
        raise ModelError(f"no tensor of {source.name} matches {pattern!r}")
    cache_dir.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=cache_dir, prefix=target.name, suffix=".part")
    os.close(fd)
    os.chmod(partial, 0o644)
    try:
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = _file_type(source)
        params.allow_requantize = True
        params.nthread = min(2, os.cpu_count() or 1)
        # The embeddings and output keep their own types (the ftype's rules would re-pick them).
        for field, name in (("token_embedding_type", "token_embd.weight"), ("output_tensor_type", "output.weight")):
            if name in before and not re.search(pattern, name):
                setattr(params, field, getattr(llama_cpp, f"GGML_TYPE_{before[name][0]}"))
        overrides = (llama_cpp.llama_model_tensor_override * 2)()
        overrides[0].pattern, overrides[0].type = pattern.encode(), gtype
        overrides[1].pattern = None
        params.tt_overrides = ctypes.cast(overrides, ctypes.POINTER(llama_cpp.llama_model_tensor_override))
        rc = llama_cpp.llama_model_quantize(str(source).encode(), partial.encode(), ctypes.byref(params))
        if rc != 0:
            raise ModelError(f"re-quantizing {pattern!r} of {source.name} to {qtype} failed (llama.cpp returned {rc})")
        after = _tensor_layout(Path(partial))
        changed = sorted(name for name in before if before[name] != after.get(name))
        if [n for n in changed if n not in matched]:
            raise ModelError(f"re-quantizing {pattern!r} of {source.name} also changed {changed[:3]}")
        # llama.cpp falls back to another type where rows do not fit the type's blocks, and skips
        # tensors it does not quantize (norms): such a copy is not the fault asked for.
        wrong = [n for n in matched if after[n][0] != qtype]
        if wrong or not changed:
            got = sorted({after[n][0] for n in wrong})
            raise ModelError(f"re-quantizing {pattern!r} of {source.name} to {qtype} left {len(wrong)} of "
                             f"{len(matched)} matching tensors as {got}")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


def _tensor_layout(path: Path) -> dict[str, tuple[str, str]]:
    """Tensor name -> (type name, digest of its bytes), read with llama.cpp's own GGUF reader."""
    try:
        from gguf import GGUFReader
    except ImportError as exc:
        raise ModelError(f"re-quantizing single tensors needs the gguf package (the testbed extra): {exc}") from None
    reader = GGUFReader(path)
    return {t.name: (t.tensor_type.name, hashlib.sha256(t.data.tobytes()).hexdigest()) for t in reader.tensors}


def _file_type(path: Path) -> int:
    from gguf import GGUFReader

    field = GGUFReader(path).fields.get("general.file_type")
    if field is None:
        raise ModelError(f"{path.name} does not say its file type (general.file_type)")
    return int(field.parts[field.data[0]][0])


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class LlamaOptions:
    n_ctx: int = 2048
    n_threads: int = 1
    seed: int = 1234


def load_llama(path: Path, options: LlamaOptions) -> Any:
    """A `llama_cpp.Llama` for `path`, keeping logits of every position (for logprobs)."""
    import llama_cpp

    disable_extra_buffers()
    try:
        return llama_cpp.Llama(
            model_path=str(path),
            n_ctx=options.n_ctx,
            n_threads=options.n_threads,
            n_threads_batch=options.n_threads,
            logits_all=True,
            seed=options.seed,
            verbose=False,
        )
    except (ValueError, RuntimeError) as exc:
        raise ModelError(f"cannot load {path.name}: {exc}") from None


def disable_extra_buffers() -> None:
    """Load weights without llama.cpp's extra CPU buffers (AMX, repack): on VMs that advertise
    AMX without enabling it they fault on the first batch (scripts/build_llama_server.sh builds the
    bundled engine without AMX code for the same reason).
    Idempotent; patches the name `Llama.__init__` looks up at call time."""
    import llama_cpp.llama_cpp as low_level

    current = low_level.llama_model_default_params
    if getattr(current, "_testbed_no_extra_buffers", False):
        return

    def params() -> Any:
        p = current()
        p.use_extra_bufts = False
        return p

    params._testbed_no_extra_buffers = True  # type: ignore[attr-defined]
    low_level.llama_model_default_params = params


@dataclass
class LoadedModel:
    path: Path
    llm: Any
    lock: threading.Lock = field(default_factory=threading.Lock)


class ModelPool:
    """Each file loaded once; `get` is thread-safe and blocks while the file loads."""

    def __init__(self, loader: Callable[[Path], Any]) -> None:
        self._loader = loader
        self._models: dict[Path, LoadedModel] = {}
        self._loading: dict[Path, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, path: Path) -> LoadedModel:
        with self._guard:
            if (model := self._models.get(path)) is not None:
                return model
            loading = self._loading.setdefault(path, threading.Lock())
        with loading:
            with self._guard:
                if (model := self._models.get(path)) is not None:
                    return model
            model = LoadedModel(path, self._loader(path))
            with self._guard:
                self._models[path] = model
            return model

    def loaded(self) -> list[Path]:
        with self._guard:
            return list(self._models)

    def close(self) -> None:
        with self._guard:
            models, self._models = list(self._models.values()), {}
        for model in models:
            with model.lock:
                close = getattr(model.llm, "close", None)
                if close is not None:
                    close()
