"""A fake OpenTelemetry collector: a real aiohttp server on loopback taking OTLP/HTTP protobuf exports
(``POST /v1/traces``, an `ExportTraceServiceRequest`, gzip or not) and answering as a collector does.

Each export is kept decoded in ``collector.exports`` with its headers; ``collector.spans()`` flattens
them. ``hold()`` makes it take exports without answering until ``release()`` (a collector that hangs).

    async with FakeOTLPCollector() as collector:
        endpoint = collector.url   # http://127.0.0.1:<port>/v1/traces

or ``python -m tests.fakes.otlp_collector --port 4318`` for the bench (``GET /_spans`` counts them).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span


@dataclass(frozen=True)
class Export:
    headers: dict[str, str]
    request: ExportTraceServiceRequest


def value(v: AnyValue) -> Any:
    """An attribute's value as Python (the kinds spans carry here)."""
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def attributes(span: Span) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in span.attributes}


class FakeOTLPCollector:
    def __init__(self, port: int = 0) -> None:
        self.exports: list[Export] = []
        self.received = asyncio.Event()
        self._open = asyncio.Event()
        self._open.set()
        self._runner: web.AppRunner | None = None
        self.port = port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def spans(self) -> list[Span]:
        return [
            span
            for export in self.exports
            for resource in export.request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def services(self) -> set[str]:
        return {
            value(kv.value)
            for export in self.exports
            for resource in export.request.resource_spans
            for kv in resource.resource.attributes
            if kv.key == "service.name"
        }

    async def _traces(self, request: web.Request) -> web.Response:
        if request.content_type != "application/x-protobuf":
            return web.Response(status=415)
        body = await request.read()  # aiohttp undoes Content-Encoding: gzip
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        self.exports.append(Export(dict(request.headers), export))
        self.received.set()
        await self._open.wait()
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )

    async def _count(self, request: web.Request) -> web.Response:
        return web.json_response({"exports": len(self.exports), "spans": len(self.spans())})

    async def start(self) -> FakeOTLPCollector:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_get("/_spans", self._count)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        try:
            await web.SockSite(self._runner, sock).start()
        except BaseException:
            sock.close()
            raise
        return self

    async def stop(self) -> None:
        self.release()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeOTLPCollector:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the fake OTLP/HTTP collector.")
    parser.add_argument("--port", type=int, default=4318)
    args = parser.parse_args()

    async def serve() -> None:
        async with FakeOTLPCollector(args.port) as collector:
            print(f"fake collector on {collector.url}", flush=True)
            await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
