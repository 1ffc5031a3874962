"""The floor without a framework: a forwarding proxy on asyncio.Protocol and httptools alone.

    python bench/raw_proxy.py --port 9004 --upstream http://127.0.0.1:9001

For floor.py: the same forwarding as bare_proxy.py (the gateway's upstream client, each request sent
on as it came), but no uvicorn and no ASGI: the request is parsed by httptools in the protocol,
and the answer leaves in one write. Non-streaming answers only; no keep-alive timeout, no limits,
no error handling beyond a 502. Not a server to deploy: it only shows what one more Python hop
costs on this machine, with as little as possible in it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from http import HTTPStatus
from pathlib import Path

import httptools
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bare_proxy import TIMEOUTS  # noqa: E402

from kernel.errors import ProviderError  # noqa: E402
from providers.base import UpstreamRequest  # noqa: E402
from providers.http import AiohttpClient  # noqa: E402

BAD_GATEWAY = b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n"


class ForwardingProtocol(asyncio.Protocol):
    def __init__(self, client: AiohttpClient, upstream: str) -> None:
        self.client, self.upstream = client, upstream
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    # httptools callbacks
    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body, self.body = b"".join(self.body), []
        method = self.parser.get_method().decode("latin-1")
        asyncio.get_running_loop().create_task(self.forward(method, self.url.decode("latin-1"), body))

    async def forward(self, method: str, path: str, body: bytes) -> None:
        assert self.transport is not None
        request = UpstreamRequest(method, self.upstream + path, {"content-type": "application/json"}, body)
        try:
            response = await self.client.send(request, TIMEOUTS, "upstream")
            try:
                answer = await response.read()
            finally:
                response.close()
        except ProviderError:
            self.transport.write(BAD_GATEWAY)
            return
        head = f"HTTP/1.1 {response.status} {HTTPStatus(response.status).phrase}\r\ncontent-type: application/json\r\n"
        self.transport.write(f"{head}content-length: {len(answer)}\r\n\r\n".encode("latin-1") + answer)


async def serve(port: int, upstream: str) -> None:
    client = AiohttpClient()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: ForwardingProtocol(client, upstream), "127.0.0.1", port)
    try:
        await server.serve_forever()
    finally:
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="base URL of the upstream, e.g. http://127.0.0.1:9001")
    args = parser.parse_args()
    uvloop.run(serve(args.port, args.upstream.rstrip("/")))


if __name__ == "__main__":
    main()
