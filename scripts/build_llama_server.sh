#!/usr/bin/env bash
# Build llama.cpp's own server (`llama-server`, MIT licence) once, from the llama.cpp source that
# ships inside the llama-cpp-python sdist pinned by pyproject.toml's `testbed` extra
# (vendor/llama.cpp), and link it as .venv/bin/llama-server. Only the sdist is fetched (pip
# download, no build of the Python package: llama-cpp-python itself is installed only with the
# testbed/test extras). The binary is cached under ~/.cache/llm-gateway/ keyed by the sdist's hash
# (and the backend), so a second run only checks. Nothing is fetched at build time: the web UI
# download, CURL, OpenSSL, tests and examples are off, and only the server target is built.
#   CMAKE_BUILD_PARALLEL_LEVEL  compile jobs (default: all cores)
#   LLAMA_SERVER_CUDA           1/0 forces the CUDA backend on/off (default: on when nvcc and a GPU exist)
#   LLAMA_SERVER_CMAKE_ARGS     extra cmake arguments
#   LLAMA_CPP_PYTHON_VERSION    another sdist version than the pin
# `--print-config` prints the version, backend and cmake arguments it would build with, and exits.
set -euo pipefail
cd "$(dirname "$0")/.."

export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
py=.venv/bin/python; [ -x "$py" ] || py=python3
pinned_version() {  # the `llama-cpp-python==X` of pyproject.toml's testbed extra
  "$py" -c 'import re, sys, tomllib
extra = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["testbed"]
pins = [m.group(1) for r in extra if (m := re.fullmatch(r"llama-cpp-python==([\w.]+)", r.replace(" ", "")))]
sys.exit("pyproject.toml: the testbed extra pins no llama-cpp-python==X") if len(pins) != 1 else print(pins[0])'
}
version="${LLAMA_CPP_PYTHON_VERSION:-$(pinned_version)}"

cuda="${LLAMA_SERVER_CUDA:-}"
if [ -z "$cuda" ]; then
  cuda=0
  if command -v nvcc >/dev/null && { [ -e /dev/nvidia0 ] || nvidia-smi -L >/dev/null 2>&1; }; then cuda=1; fi
fi
backend=cpu; [ "$cuda" = 1 ] && backend=cuda
args=(
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
  # Some VMs advertise AMX without enabling it: AMX code then faults on the first batch.
  "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
)
if [ "$cuda" = 1 ]; then
  args+=(-DGGML_CUDA=ON)
  # Only the GPUs present: a build for every architecture takes far longer.
  if nvidia-smi -L >/dev/null 2>&1; then args+=(-DCMAKE_CUDA_ARCHITECTURES=native); fi
fi
# shellcheck disable=SC2206
args+=(${LLAMA_SERVER_CMAKE_ARGS:-})
if [ "${1:-}" = --print-config ]; then
  printf 'version=%s\nbackend=%s\n' "$version" "$backend"
  printf 'cmake_arg=%s\n' "${args[@]}"
  exit 0
fi

cache="${XDG_CACHE_HOME:-$HOME/.cache}/llm-gateway"
mkdir -p "$cache/sdist"
sdist="$cache/sdist/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  # The sdist only: pip prepares its metadata (a minute, for scikit-build-core) but builds nothing.
  echo "==> fetching the llama-cpp-python $version source package" >&2
  "$py" -m pip download --quiet --no-deps --no-binary :all: --dest "$cache/sdist" "llama-cpp-python==$version"
fi
key="$(sha256sum "$sdist" | cut -c1-16)-$backend"
out="$cache/llama-server-$key"

if [ ! -x "$out/llama-server" ]; then
  # A C++ compiler and CMake >= 3.14; CMake from the registry when the machine has none.
  cmake=cmake
  if ! command -v cmake >/dev/null; then
    .venv/bin/pip install --quiet cmake
    cmake=.venv/bin/cmake
  fi
  echo "==> building llama-server ($backend, $CMAKE_BUILD_PARALLEL_LEVEL jobs; about 8 minutes on 2 idle cores)" >&2
  work="$(mktemp -d "$cache/build.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  tar -xzf "$sdist" -C "$work" --strip-components=1 --wildcards '*/vendor/llama.cpp/*'
  "$cmake" -S "$work/vendor/llama.cpp" -B "$work/build" "${args[@]}" >"$work/configure.log" 2>&1 \
    || { cat "$work/configure.log" >&2; exit 1; }
  "$cmake" --build "$work/build" --config Release --target llama-server >"$work/build.log" 2>&1 \
    || { tail -50 "$work/build.log" >&2; exit 1; }
  mkdir -p "$out.tmp"
  cp "$work/build/bin/llama-server" "$out.tmp/"
  cp "$work/vendor/llama.cpp/LICENSE" "$out.tmp/LICENSE"
  rm -rf "$out" && mv "$out.tmp" "$out"
fi
ln -sfn "$out/llama-server" .venv/bin/llama-server
echo "==> llama-server: $out/llama-server" >&2
