"""Run ``llama_cpp.server`` (same flags) with two fixes the server has no option for.

1. Extra CPU weight buffers (AMX, repack) off. A wheel built with GGML_NATIVE on an AMX-capable
   CPU loads weights into AMX tiles, and on VMs that advertise AMX without enabling it (this
   project's Firecracker machines) the first multi-token batch dies with a general protection
   fault on `ldtilecfg`: the engine segfaults on every prompt longer than one token. A wheel built
   with ``CMAKE_ARGS="-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"`` would not need it.
2. A prefix cache whose ``--cache_size`` bounds its real size. `LlamaRAMCache` counts only the
   llama.cpp state of each entry, but every entry also keeps a float32 copy of the logits of all its
   tokens (n_tokens x n_vocab, needed for logprobs): about 200 KB a token for SmolLM2, 1 MB for
   Gemma 3, roughly 9x and 58x what is counted. Measured: +220 MiB RSS per distinct 1k-token prompt.
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


def _fully_counted(ram_cache: type) -> type:
    class FullyCountedRAMCache(ram_cache):  # type: ignore[misc, valid-type]
        @property
        def cache_size(self) -> int:
            return sum(
                s.llama_state_size + s.scores.nbytes + s.input_ids.nbytes for s in self.cache_state.values()
            )

    return FullyCountedRAMCache


def main() -> None:
    import llama_cpp
    import llama_cpp.llama_cpp as low_level
    from llama_cpp.server.__main__ import main as server_main

    # Both names are looked up on their modules at call time (Llama.__init__, the server's model
    # loader), so replacing them here takes effect.
    low_level.llama_model_default_params = _without_extra_buffers(low_level.llama_model_default_params)
    llama_cpp.LlamaRAMCache = _fully_counted(llama_cpp.LlamaRAMCache)
    server_main()


if __name__ == "__main__":
    main()
