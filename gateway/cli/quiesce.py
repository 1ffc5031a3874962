"""Stop accepting connections without dropping a request already on its way in.

uvicorn's shutdown closes its listeners and then every connection without a request in progress.
Two kinds of connection carry a request the server never answers then: one the kernel queued on the
listener that the loop had not yet accepted (closing a listener resets its queue), and one accepted
whose request is still unread in the socket (closing a socket with unread data sends a reset). A
balancer that checks its replicas passively (nginx) keeps sending to a draining replica until its
connections are refused, and a POST it has sent is never retried: each such reset is a 502.

So: accept what the listeners have queued, close them (new connections are refused from then on, and
a balancer moves to another replica), and let every accepted connection read what it was sent, before
uvicorn's own shutdown (which then finishes those requests with `connection: close`).
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import Iterable, Sequence
from typing import Any

# Loop turns, each with the listeners found empty, before they close: a connection accepted in the
# meantime has its transport built and registered first (the accept, the task that builds the
# transport, `connection_made`); CPython 3.11's loop loses one whose transport comes after the close.
_QUIET_TURNS = 5


def _readable(fds: Iterable[int]) -> bool:
    poller = select.poll()
    registered = False
    for fd in fds:
        if fd >= 0:
            poller.register(fd, select.POLLIN)
            registered = True
    return registered and bool(poller.poll(0))


def _listener_fds(servers: Iterable[asyncio.AbstractServer]) -> list[int]:
    return [sock.fileno() for server in servers for sock in (getattr(server, "sockets", None) or ())]


def _awaiting_a_request(connections: Iterable[Any]) -> bool:
    """Whether a connection with no request in progress has one to come: it never had one (a
    balancer connects, then writes; on a busy machine it can be descheduled in between), or bytes
    of its next one wait in the socket. An idle kept-alive connection with nothing waiting has none."""
    fds = []
    for conn in list(connections):
        if not hasattr(conn, "cycle"):  # not an HTTP/1.1 protocol (a WebSocket): nothing to wait for
            continue
        cycle, transport = conn.cycle, getattr(conn, "transport", None)
        if transport is None or transport.is_closing() or (cycle is not None and not cycle.response_complete):
            continue
        if cycle is None:
            return True
        sock = transport.get_extra_info("socket")
        if sock is not None:
            fds.append(sock.fileno())
    return _readable(fds)


async def _turn(turns: int) -> None:
    # The first turns only yield (what is waiting is usually read within a few); later ones sleep a
    # little, so a peer that keeps the wait going does not spin a core for the whole limit.
    await asyncio.sleep(0 if turns < 10 else 0.001)


async def stop_accepting(servers: Sequence[asyncio.AbstractServer], connections: Iterable[Any], limit: float) -> None:
    """Accept what the listeners queued, close them, then let accepted connections read their
    requests; the waits end after `limit` seconds in all (a peer that keeps connecting, or that
    connected and sends nothing)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    fds = _listener_fds(servers)
    quiet = turns = 0
    while quiet < _QUIET_TURNS and loop.time() < end:
        await _turn(turns)  # the loop accepts what is queued and builds its transports
        turns += 1
        quiet = 0 if _readable(fds) else quiet + 1
    for server in servers:
        server.close()
    turns = 0
    while _awaiting_a_request(connections) and loop.time() < end:
        await _turn(turns)
        turns += 1
