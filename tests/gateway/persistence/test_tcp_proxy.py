"""The outage tests' TCP proxy: `cut()` must end every open connection at once, including one
whose client is waiting for an answer (its pump threads blocked in recv). Before the fix a cut
only closed the descriptors, the kernel kept such a connection open, and a database client
waiting on it (the gateway's key refresh) waited for ever: test_outage hung at shutdown."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.gateway.persistence.tcp_proxy import TcpProxy

# A reset on loopback arrives in microseconds; this only bounds the failure, it is not a wait.
NOTICE_S = 2.0


@pytest.fixture
def echo_server() -> Iterator[tuple[str, int]]:
    """A server that accepts and then stays silent, as a database busy with a query does."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield server.getsockname()
    finally:
        # A close alone leaves accept() blocked and able to take one more connection, which would
        # then be left for the garbage collector (a ResourceWarning that fails a later test).
        server.shutdown(socket.SHUT_RDWR)
        acceptor.join(NOTICE_S)
        server.close()
        for conn in held:
            conn.close()


def test_a_cut_resets_a_connection_waiting_for_its_answer(echo_server: tuple[str, int]) -> None:
    proxy = TcpProxy(echo_server)
    client = socket.create_connection(("127.0.0.1", proxy.port), timeout=NOTICE_S)
    try:
        client.sendall(b"SELECT 1")  # a query in flight: both pumps now sit in recv()
        deadline = time.monotonic() + NOTICE_S
        while proxy.connections == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)  # the pump threads reach their recv()
        proxy.cut()
        began = time.monotonic()
        with pytest.raises((ConnectionResetError, EOFError)):
            if client.recv(1) == b"":
                raise EOFError
        assert time.monotonic() - began < NOTICE_S
    finally:
        proxy.close()
        client.close()


def test_a_cut_refuses_new_connections_and_restore_accepts_them(echo_server: tuple[str, int]) -> None:
    proxy = TcpProxy(echo_server)
    try:
        proxy.cut()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=NOTICE_S).close()
        proxy.restore()
        socket.create_connection(("127.0.0.1", proxy.port), timeout=NOTICE_S).close()
    finally:
        proxy.close()
