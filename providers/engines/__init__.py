"""The bundled local engine: resolve its model, build its command line, start and supervise it.

`EngineSupervisor` runs `EngineConfig.replicas` engine processes (llama.cpp, vLLM or SGLang), or
watches an external one, and exposes each replica's base URL and readiness to the router.
"""

from providers.engines.commands import ENGINE_KINDS, EngineKind
from providers.engines.errors import EngineStartError
from providers.engines.models import resolve_model
from providers.engines.supervisor import EngineSupervisor, Replica, ReplicaState

__all__ = [
    "ENGINE_KINDS",
    "EngineKind",
    "EngineStartError",
    "EngineSupervisor",
    "Replica",
    "ReplicaState",
    "resolve_model",
]
