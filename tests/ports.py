"""Loopback ports for the servers tests start, outside the kernel's ephemeral range.

A port picked by binding to 0 comes from that range, and so do the ports every later `bind(0)`
and every outgoing connection take: between the pick and the server's own bind, another process
(a local engine picking its own port, a client's source port) can take it. The fault drill's nginx
once found its port taken by an engine replica and its readiness check then saw that engine
listening. Below the range only ports handed out here are bound, and never the same one twice in a
process.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_LOWEST = 10_000  # below: well-known services (PostgreSQL 5432, Redis 6379, 8080...)
_handed_out: set[int] = set()
_random = random.SystemRandom()  # a test seeding `random` must not make every process pick alike


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port() -> int:
    low = _ephemeral_low()
    if low - _LOWEST >= 1_000:
        for _ in range(200):
            port = _random.randrange(_LOWEST, low)
            if port in _handed_out:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    with socket.socket() as sock:  # no room below the range: the kernel's pick
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    _handed_out.add(port)
    return port
