"""The local engines' configuration slice (`Settings.engines` composes a tuple of these)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from kernel.deployment import Capabilities, DeploymentRouting, NativeApi, Price, header_safe
from kernel.frozen import Frozen


class EngineConfig(Frozen):
    """A local engine that the gateway starts and supervises (see `providers.engines`)."""

    name: str = Field("local", pattern=r"^[A-Za-z0-9_.\-]+$")
    kind: Literal["llamacpp", "vllm", "sglang", "external"] = "llamacpp"
    # A shipped model alias ("smollm2", "gemma3-270m"), a GGUF path, or a model id for vLLM/SGLang.
    model: str = "smollm2"
    # The public model name clients ask for.
    served_model_name: str = "smollm2-135m-instruct"
    replicas: int = Field(1, ge=1, le=16)
    host: str = "127.0.0.1"
    # Replica i listens on base_port + i; 0 picks free ports.
    base_port: int = Field(0, ge=0, le=65535)
    # For kind=external: the running engine's OpenAI base URL.
    url: str | None = None
    n_ctx: int = Field(4096, gt=0)
    n_threads: int | None = Field(None, ge=1)
    # llama.cpp: sequences one replica decodes at once (llama-server -np, continuous batching),
    # each with its own n_ctx of KV cache; routing counts them as the replica's slots.
    parallel: int = Field(4, ge=1, le=64)
    # llama.cpp: serve /v1/embeddings only (llama-server --embeddings), pooling the model's
    # hidden states this way ("mean" makes any chat model an embedding model, if not a good one).
    embeddings: bool = False
    pooling: Literal["mean", "cls", "last"] = "mean"
    # llama.cpp: a Jinja chat template to use instead of the GGUF's own (default: the GGUF's; for the
    # shipped smollm2, its template extended with tool calls, see providers/engines/templates/).
    chat_template_file: str | None = None
    prefix_cache: bool = True
    tensor_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    extra_args: tuple[str, ...] = ()
    ready_timeout: float = Field(180.0, gt=0)
    restart_backoff_initial: float = Field(0.5, gt=0)
    restart_backoff_max: float = Field(30.0, gt=0)
    price: Price = Price()
    capabilities: Capabilities = Capabilities()
    # Routing hints for every replica (default: `parallel` slots each for llama.cpp, else one;
    # the engine's cache profile).
    routing: DeploymentRouting = DeploymentRouting()
    # Client APIs the engine serves itself, passed through instead of translated (`DeploymentConfig.native`):
    # llama.cpp serves Anthropic's Messages. Not Responses: llama-server's /v1/responses events lack the
    # `sequence_number`, `output_index` and `content_index` the SDKs' stream helpers index by.
    native: frozenset[NativeApi] = frozenset()
    # The weights it serves (`DeploymentConfig.weights`); default: a shipped model's own
    # quantization (providers.engines.models.SHIPPED_WEIGHTS), else unknown.
    weights: str | None = Field(None, min_length=1, max_length=64)

    _name_header_safe = field_validator("served_model_name", "weights")(header_safe)

    @model_validator(mode="after")
    def _external_needs_url(self) -> EngineConfig:
        if self.kind == "external" and not self.url:
            raise ValueError("kind 'external' needs url")
        if "responses" in self.native:
            raise ValueError(
                "native: responses is not taken from llama-server (its /v1/responses events lack sequence_number, "
                "output_index and content_index) nor from other engines; Responses requests to engines are translated"
            )
        if self.native and (self.kind != "llamacpp" or self.embeddings):
            raise ValueError("native: only a llamacpp chat engine serves Messages itself")
        return self
