"""Local engines as endpoints: slots, cache capacity, modes and the engine's own load report."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.engines import engine_endpoints
from gateway.routing.affinity import profile_for
from kernel.deployment import DeploymentRouting
from providers.engines import Replica
from providers.engines.config import EngineConfig
from providers.engines.load import EngineLoad


class Supervisor:
    def __init__(self, replicas: int = 1) -> None:
        self.replicas = [Replica(i, 9001 + i, f"http://127.0.0.1:{9001 + i}/v1", "m") for i in range(replicas)]
        self.loads: dict[int, EngineLoad] = {}

    def is_ready(self, index: int) -> bool:
        return True

    def load(self, index: int) -> EngineLoad | None:
        return self.loads.get(index)


def test_a_llamacpp_replica_has_parallel_slots_and_their_kv_as_its_cache() -> None:
    (ep,) = engine_endpoints(EngineConfig(parallel=3, n_ctx=2048), Supervisor())
    assert ep.deployment.routing.slots == 3
    profile = profile_for(ep)
    assert profile.capacity_tokens == 3 * 2048 and profile.reports  # llama-server reports cached_tokens
    # What the operator sets wins.
    routing = DeploymentRouting(slots=1, cache={"capacity_tokens": 100})
    (set_ep,) = engine_endpoints(EngineConfig(routing=routing), Supervisor())
    assert set_ep.deployment.routing.slots == 1 and profile_for(set_ep).capacity_tokens == 100
    (vllm,) = engine_endpoints(EngineConfig(kind="vllm", model="org/m"), Supervisor())
    assert vllm.deployment.routing.slots == 1


def test_an_embeddings_engine_serves_embeddings_only() -> None:
    (ep,) = engine_endpoints(EngineConfig(embeddings=True), Supervisor())
    assert ep.deployment.capabilities.modes == {"embeddings"}
    (chat,) = engine_endpoints(EngineConfig(), Supervisor())
    assert "chat" in chat.deployment.capabilities.modes


def test_each_endpoint_reads_its_own_replicas_load() -> None:
    sup = Supervisor(replicas=2)
    a, b = engine_endpoints(EngineConfig(replicas=2), sup)
    assert a.reported_load() is None and b.reported_load() is None
    sup.loads[1] = EngineLoad(processing=2, deferred=1, slots=4, kv_usage=0.5, read_at=0.0)
    assert a.reported_load() is None and b.reported_load() is sup.loads[1]


def test_a_llamacpp_engine_may_take_messages_as_is_and_no_other_engine_may() -> None:
    (plain,) = engine_endpoints(EngineConfig(), Supervisor())
    (native,) = engine_endpoints(EngineConfig(native=frozenset({"messages"})), Supervisor())
    assert plain.deployment.native == frozenset() and native.deployment.native == {"messages"}
    assert "messages" in native.adapter.native_apis  # type: ignore[attr-defined]
    for other in ({"kind": "vllm", "model": "org/m"}, {"embeddings": True}):
        with pytest.raises(ValidationError, match="only a llamacpp chat engine serves Messages itself"):
            EngineConfig(native=frozenset({"messages"}), **other)  # type: ignore[arg-type]


def test_no_engine_takes_responses_as_is() -> None:
    # llama-server's /v1/responses events lack what the SDKs' stream helpers index by.
    with pytest.raises(ValidationError, match="native: responses is not taken from llama-server"):
        EngineConfig(native=frozenset({"responses"}))
    with pytest.raises(ValidationError, match="native: responses is not taken from llama-server"):
        EngineConfig(native=frozenset({"messages", "responses"}))


def test_an_engine_declares_the_weights_it_serves() -> None:
    """A shipped model's own quantization, unless the operator says otherwise; unknown for other models."""
    (shipped,) = engine_endpoints(EngineConfig(), Supervisor())
    assert shipped.deployment.weights == "Q4_1"
    (gemma,) = engine_endpoints(EngineConfig(model="gemma3-270m"), Supervisor())
    assert gemma.deployment.weights == "Q4_K_M"
    (told,) = engine_endpoints(EngineConfig(weights="Q8_0"), Supervisor())
    assert told.deployment.weights == "Q8_0"
    (vllm,) = engine_endpoints(EngineConfig(kind="vllm", model="org/m"), Supervisor())
    assert vllm.deployment.weights is None
    # An external engine's model name is no proof of its file, even a shipped alias's.
    (external,) = engine_endpoints(EngineConfig(kind="external", url="http://127.0.0.1:9/v1"), Supervisor())
    assert external.deployment.weights is None
    with pytest.raises(ValidationError, match="printable ASCII"):
        EngineConfig(weights="Q4\n1")


def test_the_shipped_weights_are_the_gguf_files_own_type() -> None:
    """What the engine declares is what its file carries (general.file_type, read with gguf)."""
    import gguf  # the testbed extra (`test` installs it)

    from providers.engines.models import SHIPPED_MODELS, SHIPPED_WEIGHTS, default_cache_dir

    assert set(SHIPPED_WEIGHTS) == set(SHIPPED_MODELS)
    for model, path_of in SHIPPED_MODELS.items():
        field = gguf.GGUFReader(str(path_of("test", default_cache_dir()))).fields["general.file_type"]
        file_type = gguf.LlamaFileType(int(field.parts[field.data[0]][0]))
        assert file_type.name == f"MOSTLY_{SHIPPED_WEIGHTS[model]}"
