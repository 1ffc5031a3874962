from tests.gateway.limits.helpers import stores

__all__ = ["stores"]
