"""The floor under the gateway: a bare forwarding proxy on the same stack, doing nothing else.

    python bench/bare_proxy.py --port 9003 --upstream http://127.0.0.1:9001

uvicorn with uvloop and httptools, a raw ASGI app, and the gateway's own upstream client
(`providers.http.AiohttpClient`): each POST is forwarded as it came, its answer streamed back
as it arrives. No auth, validation, routing, accounting or headers of its own. `overhead.py`
measures it beside the gateway, so the table separates what any Python proxy on this machine
costs (the extra hops: two more wake-ups of an idle process per request) from what the gateway's
own work adds on top.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from providers.base import UpstreamRequest  # noqa: E402
from providers.http import (
    AiohttpClient,  # noqa: E402
    Timeouts,  # noqa: E402
)

TIMEOUTS = Timeouts(connect=5.0, first_byte=30.0, between_chunks=30.0, total=120.0)


def build(upstream: str) -> Any:
    client: AiohttpClient | None = None

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal client
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    client = AiohttpClient()
                    await send({"type": "lifespan.startup.complete"})
                else:
                    assert client is not None
                    await client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        assert client is not None
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = {"content-type": "application/json"}
        request = UpstreamRequest(scope["method"], upstream + scope["path"], headers, body)
        response = await client.send(request, TIMEOUTS, "upstream")
        kind = response.headers.get("content-type", "application/json").encode("latin-1")
        await send({"type": "http.response.start", "status": response.status, "headers": [(b"content-type", kind)]})
        try:
            async for chunk in response.chunks():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            response.close()
        await send({"type": "http.response.body", "body": b""})

    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="base URL of the upstream, e.g. http://127.0.0.1:9001")
    args = parser.parse_args()
    uvicorn.run(build(args.upstream.rstrip("/")), host="127.0.0.1", port=args.port, loop="uvloop", http="httptools",
                log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
