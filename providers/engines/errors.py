"""The one error the engine supervisor raises at start-up."""

from __future__ import annotations

from kernel.errors import GatewayError


class EngineStartError(GatewayError):
    """A local engine could not be started. The message is one line that names the engine."""
