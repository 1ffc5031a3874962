"""A loopback upstream in its own process, so the client's process counts only its own sockets:
``python -m tests.providers.http_contract.echo_server`` prints its port, then serves until killed.
``/fast`` answers at once; ``/slow-head`` waits before its headers; ``/slow-body`` sends half its
body, waits, then the rest."""

from __future__ import annotations

import asyncio
import sys

from aiohttp import web

BODY = b'{"text": "' + b"x" * 4000 + b'"}'


async def fast(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=BODY, content_type="application/json")


async def slow_head(request: web.Request) -> web.Response:
    await request.read()
    await asyncio.sleep(0.02)
    return web.Response(body=BODY, content_type="application/json")


async def slow_body(request: web.Request) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(headers={"content-type": "application/json", "content-length": str(len(BODY))})
    await resp.prepare(request)
    await resp.write(BODY[:2000])
    await asyncio.sleep(0.02)
    await resp.write(BODY[2000:])
    return resp


async def main() -> None:
    app = web.Application()
    app.router.add_post("/fast", fast)
    app.router.add_post("/slow-head", slow_head)
    app.router.add_post("/slow-body", slow_body)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    print(site._server.sockets[0].getsockname()[1], flush=True)  # type: ignore[union-attr]
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
