"""The testbed server: named OpenAI-compatible endpoints, each serving under a settable fault.

    POST /{name}/v1/chat/completions, POST /{name}/v1/completions, GET /{name}/v1/models
    GET  /_testbed/endpoints                 each endpoint's model, fault and counts
    PUT  /_testbed/endpoints/{name}/fault    a JSON fault spec (`{}` clears); resets the counts
    GET  /_testbed/health

Counts say how many requests each fault touched since the fault was set, so tests can check
injection rates. Run as `python -m probes.testbed.server --endpoints JSON`: it binds a free
loopback port, loads the models, then prints `TESTBED READY <base url>` on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from probes.testbed.backends import (
    LlamaOptions,
    ModelError,
    ModelFiles,
    ModelPool,
    llama_cpp_missing,
    load_llama,
    quantized_cache_dir,
)
from probes.testbed.endpoints import READY_LINE, EndpointSpec
from probes.testbed.faults import FaultSpec, FaultSpecError, draw, parse_fault
from probes.testbed.service import Service
from probes.testbed.wire import BadRequest, error_body, parse_chat, parse_completion


@dataclass
class EndpointState:
    name: str
    model: str
    fault: FaultSpec
    rng: np.random.Generator
    counts: Counter[str] = field(default_factory=Counter)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "fault": self.fault.as_json(), "counts": dict(self.counts)}


class ServedEndpoints:
    """The endpoints of one server process and the service that runs their requests."""

    def __init__(self, specs: Sequence[EndpointSpec], service: Service) -> None:
        self.service = service
        self.endpoints = {s.name: EndpointState(s.name, s.model, s.fault_spec(), _rng(s.fault_spec())) for s in specs}

    def prepare_all(self) -> None:
        for ep in self.endpoints.values():
            self.service.prepare(ep.model, ep.fault)

    def set_fault(self, name: str, raw: object) -> EndpointState:
        ep = self.endpoints[name]
        spec = parse_fault(raw)
        self.service.prepare(ep.model, spec)
        ep.fault, ep.rng, ep.counts = spec, _rng(spec), Counter()
        return ep


def _rng(spec: FaultSpec) -> np.random.Generator:
    return np.random.default_rng(spec.seed)


def create_app(testbed: ServedEndpoints) -> Starlette:
    async def chat(request: Request) -> JSONResponse:
        return await _serve(request, parse_chat, testbed.service.chat)

    async def completions(request: Request) -> JSONResponse:
        return await _serve(request, parse_completion, testbed.service.completion)

    async def _serve(request: Request, parse: Any, run: Any) -> JSONResponse:
        ep = testbed.endpoints.get(request.path_params["name"])
        if ep is None:
            return _error(404, f"no endpoint named {request.path_params['name']!r}", kind="not_found_error")
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _error(400, "the request body is not valid JSON")
        try:
            req = parse(body)
            draws = draw(ep.fault, ep.rng)  # in the event loop: one RNG stream per endpoint, in order
            response, touched = await run_in_threadpool(run, ep.model, ep.model, req, draws)
        except BadRequest as exc:
            return _error(400, exc.message, param=exc.param)
        except ModelError as exc:
            return _error(500, str(exc), kind="server_error")
        except Exception as exc:  # an engine failure is still an OpenAI-shaped answer
            return _error(500, f"testbed engine error: {type(exc).__name__}: {exc}", kind="server_error")
        ep.counts["requests"] += 1
        ep.counts.update(touched | ({"partial"} if draws.partial else set()))
        return JSONResponse(response)

    async def models(request: Request) -> JSONResponse:
        ep = testbed.endpoints.get(request.path_params["name"])
        if ep is None:
            return _error(404, f"no endpoint named {request.path_params['name']!r}", kind="not_found_error")
        return JSONResponse({"object": "list", "data": [{"id": ep.model, "object": "model", "owned_by": "testbed"}]})

    async def list_endpoints(request: Request) -> JSONResponse:
        return JSONResponse({"data": [ep.describe() for ep in testbed.endpoints.values()]})

    async def put_fault(request: Request) -> JSONResponse:
        name = request.path_params["name"]
        if name not in testbed.endpoints:
            return _error(404, f"no endpoint named {name!r}", kind="not_found_error")
        try:
            raw = json.loads(await request.body())
            ep = await run_in_threadpool(testbed.set_fault, name, raw)
        except ValueError as exc:  # bad JSON or a FaultSpecError
            message = str(exc) if isinstance(exc, FaultSpecError) else "the fault spec is not valid JSON"
            return _error(400, message, param="fault")
        except ModelError as exc:
            return _error(400, str(exc), param="fault")
        return JSONResponse(ep.describe())

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "endpoints": list(testbed.endpoints)})

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return _error(404, f"no route for {request.method} {request.url.path}", kind="not_found_error")

    async def bad_method(request: Request, exc: Exception) -> JSONResponse:
        return _error(405, f"{request.method} is not allowed on {request.url.path}")

    routes = [
        Route("/_testbed/endpoints", list_endpoints, methods=["GET"]),
        Route("/_testbed/endpoints/{name}/fault", put_fault, methods=["PUT"]),
        Route("/_testbed/health", health, methods=["GET"]),
        Route("/{name}/v1/chat/completions", chat, methods=["POST"]),
        Route("/{name}/v1/completions", completions, methods=["POST"]),
        Route("/{name}/v1/models", models, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={404: not_found, 405: bad_method})


def _error(status: int, message: str, *, kind: str = "invalid_request_error", param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, kind=kind, param=param), status_code=status)


def build_testbed(specs: Sequence[EndpointSpec], options: LlamaOptions) -> ServedEndpoints:
    files = ModelFiles(quantized_cache_dir())
    pool = ModelPool(lambda path: load_llama(path, options))
    return ServedEndpoints(specs, Service(files, pool))


async def serve(testbed: ServedEndpoints, host: str, port: int, parent_pid: int | None) -> int:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    config = uvicorn.Config(create_app(testbed), log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    if task.done():
        return 2
    print(f"{READY_LINE} http://{host}:{sock.getsockname()[1]}", flush=True)
    while not task.done():
        # Exit with the parent (the harness), so a killed test run leaves no server behind.
        if parent_pid is not None and not _alive(parent_pid):
            server.should_exit = True
        await asyncio.sleep(0.25)
    return 0


def _alive(pid: int) -> bool:
    if os.getppid() != pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m probes.testbed.server")
    parser.add_argument("--endpoints", required=True, help="a JSON list of endpoint specs")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--parent-pid", type=int, help="exit when this process (the harness) is gone")
    parser.add_argument("--n-ctx", type=int, default=LlamaOptions.n_ctx)
    parser.add_argument("--threads", type=int, default=LlamaOptions.n_threads)
    args = parser.parse_args(argv)
    if (missing := llama_cpp_missing()) is not None:
        print(f"testbed: {missing}", file=sys.stderr)
        return 2
    try:
        specs = [EndpointSpec.from_json(raw) for raw in json.loads(args.endpoints)]
        testbed = build_testbed(specs, LlamaOptions(n_ctx=args.n_ctx, n_threads=args.threads))
        testbed.prepare_all()
    except (ValueError, KeyError, TypeError, ModelError) as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(serve(testbed, args.host, args.port, args.parent_pid))


if __name__ == "__main__":
    sys.exit(main())
