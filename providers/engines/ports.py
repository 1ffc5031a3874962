"""Loopback ports for engine replicas: pick free ones, check a configured one is free."""

from __future__ import annotations

import contextlib
import socket

# A wildcard listen address is reached through loopback.
_WILDCARD_TO_LOOPBACK = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def free_ports(host: str, count: int) -> list[int]:
    """`count` distinct ports that are free on `host` now (the OS picks them)."""
    sockets: list[socket.socket] = []
    try:
        # Hold all of them open at once so the OS cannot hand out the same port twice.
        for _ in range(count):
            s = socket.socket(_family(host), socket.SOCK_STREAM)
            sockets.append(s)
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_in_use(host: str, port: int) -> bool:
    """Whether a listener already holds `port` (TIME_WAIT leftovers do not count, as for uvicorn)."""
    with contextlib.closing(socket.socket(_family(host), socket.SOCK_STREAM)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def base_url(host: str, port: int) -> str:
    """The OpenAI base URL of an engine listening on `host:port`."""
    target = _WILDCARD_TO_LOOPBACK.get(host, host)
    if ":" in target:
        target = f"[{target}]"
    return f"http://{target}:{port}/v1"
