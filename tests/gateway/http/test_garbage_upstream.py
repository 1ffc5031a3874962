"""The fuzz test's garbage upstream when its client hangs up mid-answer, as the gateway does on
purpose (a timeout between chunks, a body too large, a broken stream): the fake must end that
answer quietly. It used to log "Error handling request ... Cannot write to closing transport",
which failed test_fuzz about one run in three.

The race, made deterministic here: the fake's pause ends (its wake-up is queued) in the same
loop round as the client's reset; in the next round the wake-up runs before the reset is read,
so the fake writes to a dead socket (the first send fails and marks the transport closing, the
next write raises) before aiohttp learns of the lost connection and cancels the handler."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import Iterator

import pytest

from tests.fakes.garbage_upstream import Garbage, GarbageUpstream

PAUSE_S = 0.3  # the fake's pause after the first piece; only has to outlast the client's read


class Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def errors() -> Iterator[Errors]:
    handler = Errors()
    logging.getLogger().addHandler(handler)
    yield handler
    logging.getLogger().removeHandler(handler)


def _sleep_timers(loop: asyncio.AbstractEventLoop) -> list[asyncio.TimerHandle]:
    return [h for h in loop._scheduled if getattr(h, "_callback", None) is asyncio.futures._set_result_unless_cancelled]  # type: ignore[attr-defined]


async def test_a_client_resetting_as_the_pause_ends_is_no_error(errors: Errors) -> None:
    upstream = await GarbageUpstream().start()
    upstream.answer = Garbage(pieces=(b"a" * 37, b"b" * 37, b"c" * 37), stall_after=PAUSE_S)
    loop = asyncio.get_running_loop()
    client = socket.create_connection(("127.0.0.1", upstream.port))
    client.setblocking(False)
    try:
        await loop.sock_sendall(client, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        got = b""
        async with asyncio.timeout(PAUSE_S):
            while b"a" * 37 not in got:
                got += await loop.sock_recv(client, 4096)
        timers = _sleep_timers(loop)
        assert timers, "the fake is not in its pause"

        def reset() -> None:  # synchronous: the RST is on the wire within this loop round
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()

        loop.call_at(max(t.when() for t in timers), reset)
        await asyncio.sleep(PAUSE_S * 2)  # the fake wakes, writes, finds the client gone
        assert upstream.hangups == 1
    finally:
        client.close()
        await upstream.stop()
    assert not errors.records, [r.getMessage() for r in errors.records]
