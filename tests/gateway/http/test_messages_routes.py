"""/v1/messages over real sockets: a client that hangs up cancels the upstream work it started and
is accounted once, as on /v1/chat/completions."""

from __future__ import annotations

import json
import socket
import time

import httpx

from tests.fakes.servers import GatewayServer
from tests.gateway.http.test_openai_routes import HangingUpstream, served, wait_until

__all__ = ["served"]  # the fixture, shared with the chat route's tests


def messages_request(port: int, body: dict[str, object]) -> socket.socket:
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        b"POST /v1/messages HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\nanthropic-version: 2023-06-01\r\n"
        + f"content-length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return sock


def test_a_messages_client_that_hangs_up_cancels_the_upstream_work(served: tuple[GatewayServer, HangingUpstream]) -> None:
    server, upstream = served
    sock = messages_request(server.port, {"model": "one", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
    wait_until(lambda: upstream.arrived == 1)
    sock.close()
    wait_until(lambda: upstream.cancelled == 1)
    time.sleep(0.1)
    assert (upstream.arrived, upstream.cancelled) == (1, 1)
    with httpx.Client(base_url=server.root) as http:
        metrics = http.get("/metrics").text
    gone = [ln for ln in metrics.splitlines() if ln.startswith("gateway_request_errors_total{") and "ClientDisconnected" in ln]
    assert len(gone) == 1 and gone[0].endswith(" 1.0")
