"""scripts/build_llama_server.sh's choice of backend: CUDA (`-DGGML_CUDA=ON`, for the GPUs present)
when `nvcc` and a GPU are there, the CPU otherwise, and LLAMA_SERVER_CUDA forcing either way.
Checked with stand-ins for nvcc and nvidia-smi on a PATH that has nothing else of CUDA's; the
build itself is not run (no GPU here)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# A GPU device node makes the script trust a GPU even without nvidia-smi (containers).
DEVICE_NODE = Path("/dev/nvidia0").exists()


def config(tmp_path: Path, *, nvcc: bool, smi_lists_gpu: bool | None, **env: str) -> tuple[str, list[str]]:
    """(backend, cmake args) the script prints with only the given stand-ins on its PATH."""
    tmp_path = Path(tempfile.mkdtemp(dir=tmp_path))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "nproc"):  # all the script runs before --print-config, besides python
        (bin_dir / tool).symlink_to(shutil.which(tool))
    (bin_dir / "python3").symlink_to(sys.executable)
    if nvcc:
        (bin_dir / "nvcc").write_text("#!/bin/sh\nexit 0\n")
    if smi_lists_gpu is not None:
        rc = 0 if smi_lists_gpu else 9  # nvidia-smi's exit status when no device answers
        (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\n[ \"$1\" = -L ] && echo 'GPU 0: NVIDIA H100'\nexit {rc}\n")
    for stub in bin_dir.iterdir():
        if not stub.is_symlink():
            stub.chmod(0o755)
    # A copy of the scripts and pyproject.toml, without .venv: the script falls back to python3 on PATH.
    (tmp_path / "repo" / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts/build_llama_server.sh", tmp_path / "repo/scripts")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "repo")
    result = subprocess.run(
        ["/bin/bash", str(tmp_path / "repo/scripts/build_llama_server.sh"), "--print-config"],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path), **env},
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    (backend,) = [line.removeprefix("backend=") for line in lines if line.startswith("backend=")]
    return backend, [line.removeprefix("cmake_arg=") for line in lines if line.startswith("cmake_arg=")]


def test_nvcc_and_a_gpu_build_cuda_for_the_gpus_present(tmp_path: Path) -> None:
    backend, args = config(tmp_path, nvcc=True, smi_lists_gpu=True)
    assert backend == "cuda"
    assert "-DGGML_CUDA=ON" in args and "-DCMAKE_CUDA_ARCHITECTURES=native" in args


def test_no_nvcc_builds_for_the_cpu_even_with_a_gpu(tmp_path: Path) -> None:
    backend, args = config(tmp_path, nvcc=False, smi_lists_gpu=True)
    assert backend == "cpu" and not [a for a in args if "CUDA" in a]
    assert "-DLLAMA_BUILD_SERVER=ON" in args and "-DLLAMA_CURL=OFF" in args


@pytest.mark.skipif(DEVICE_NODE, reason="this machine has /dev/nvidia0, which counts as a GPU")
def test_nvcc_without_a_gpu_builds_for_the_cpu(tmp_path: Path) -> None:
    assert config(tmp_path, nvcc=True, smi_lists_gpu=False)[0] == "cpu"
    assert config(tmp_path, nvcc=True, smi_lists_gpu=None)[0] == "cpu"


def test_llama_server_cuda_forces_the_backend_either_way(tmp_path: Path) -> None:
    backend, args = config(tmp_path, nvcc=False, smi_lists_gpu=None, LLAMA_SERVER_CUDA="1")
    # Forced without a GPU to ask: CUDA, for CMake's default architectures (no `native`).
    assert backend == "cuda" and "-DGGML_CUDA=ON" in args and "-DCMAKE_CUDA_ARCHITECTURES=native" not in args
    assert config(tmp_path, nvcc=True, smi_lists_gpu=True, LLAMA_SERVER_CUDA="0")[0] == "cpu"


def test_extra_cmake_arguments_come_last(tmp_path: Path) -> None:
    _, args = config(tmp_path, nvcc=False, smi_lists_gpu=None, LLAMA_SERVER_CMAKE_ARGS="-DGGML_AVX512=OFF -DFOO=1")
    assert args[-2:] == ["-DGGML_AVX512=OFF", "-DFOO=1"]

