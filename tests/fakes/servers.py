"""Real servers on loopback for end-to-end tests: an event loop in a background thread that hosts
the fake upstreams and the gateway (uvicorn), so both sync and async clients can call them."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvicorn
from starlette.types import ASGIApp

T = TypeVar("T")


class BackgroundLoop:
    """An asyncio loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="e2e-servers", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self) -> BackgroundLoop:
        self._thread.start()
        return self

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        """Run `coro` on the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        async def _cancel_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.loop.shutdown_asyncgens()

        self.call(_cancel_rest())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


class GatewayServer:
    """The gateway app served by uvicorn on a free loopback port, in a `BackgroundLoop`."""

    def __init__(self, app: ASGIApp, loop: BackgroundLoop) -> None:
        self._loop = loop
        # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on accepted sockets whose proto says TCP.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port: int = sock.getsockname()[1]
        self._sock = sock
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, loop="asyncio", lifespan="on", log_level="warning", access_log=False
        )
        self.server = uvicorn.Server(config)
        self._future: Any = None

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.root + "/v1"

    def start(self, timeout: float = 10.0) -> GatewayServer:
        self._future = asyncio.run_coroutine_threadsafe(self.server.serve(sockets=[self._sock]), self._loop.loop)
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if self._future.done():
                self._future.result()  # raises the start-up error
                raise RuntimeError("the gateway exited during start-up")
            if time.monotonic() > deadline:
                raise TimeoutError("the gateway did not start")
            time.sleep(0.005)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.request_stop()
        self.wait_stopped(timeout)

    def request_stop(self) -> None:
        """Ask uvicorn to shut down (it takes about 0.2 s) without waiting for it."""
        self.server.should_exit = True

    def wait_stopped(self, timeout: float = 10.0) -> None:
        if self._future is not None:
            try:
                self._future.result(timeout)
            except TimeoutError:
                raise TimeoutError(f"the gateway did not stop within {timeout} s:\n{self._hang_report()}") from None
        self._sock.close()

    def _hang_report(self) -> str:
        """What uvicorn still waits for, and where every task on the loop stands (a stop that hangs
        is a bug to find, not a timeout to raise)."""
        state = self.server.server_state
        lines = [f"open connections: {len(state.connections)}, request tasks: {len(state.tasks)}"]
        for task in asyncio.all_tasks(self._loop.loop):
            lines.append(f"task {task.get_name()}: {' -> '.join(_awaiting(task.get_coro())) or 'not started'}")
        return "\n".join(lines)


def _awaiting(coro: Any) -> list[str]:
    """The chain of coroutines a suspended coroutine is waiting in, outermost first."""
    chain = []
    while coro is not None and len(chain) < 20:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            chain.append(f"{frame.f_code.co_name} ({frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno})")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None) or getattr(coro, "gi_yieldfrom", None)
    return chain
