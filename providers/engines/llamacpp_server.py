"""Run ``llama_cpp.server`` with llama.cpp's extra CPU weight buffers (AMX, repack) turned off.

Why: a llama-cpp-python wheel built with GGML_NATIVE on an AMX-capable CPU loads its weights into
AMX tiles, and on VMs that advertise AMX without really enabling it (seen on this project's
Firecracker machines) the first multi-token batch dies with a general protection fault on
`ldtilecfg`: the engine segfaults on every prompt longer than one token. The server has no flag for
it, so this entry point clears `use_extra_bufts` in the model parameters before the server loads
the model. A wheel built with ``CMAKE_ARGS="-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
-DGGML_AMX_BF16=OFF"`` does not need it.

Usage is exactly that of ``python -m llama_cpp.server``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _without_extra_buffers(default_params: Callable[[], Any]) -> Callable[[], Any]:
    def params() -> Any:
        p = default_params()
        p.use_extra_bufts = False
        return p

    return params


def main() -> None:
    import llama_cpp.llama_cpp as low_level
    from llama_cpp.server.__main__ import main as server_main

    # `Llama.__init__` looks this function up on the module at call time, so the patch takes effect.
    low_level.llama_model_default_params = _without_extra_buffers(low_level.llama_model_default_params)
    server_main()


if __name__ == "__main__":
    main()
