"""Start, watch and restart the replicas of one local engine.

`EngineSupervisor(cfg)` knows its replicas (ports, base URLs) at construction. `start()` launches
them and returns once each answers ``GET /v1/models`` (or raises `EngineStartError` with one line).
A watcher task per replica then restarts a replica whose process exits or stops answering, with
exponential backoff. For engines that report their load (llama-server's /metrics and /slots), a
poller per replica keeps `load(i)` fresh. The router reads `replicas[i].state`, `is_ready(i)` and
`load(i)`, which do no I/O.
For kind "external" there is no process: the watcher only probes the URL and sets the state.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import httpx

from providers.engines.commands import (
    ENGINE_KINDS,
    EngineKind,
    LoadReader,
    engine_environment,
    missing_requirement,
)
from providers.engines.config import EngineConfig
from providers.engines.errors import EngineStartError
from providers.engines.load import EngineLoad
from providers.engines.models import resolve_model
from providers.engines.ports import base_url, free_ports, port_in_use
from providers.engines.process import EngineProcess

ReplicaState = Literal["starting", "ready", "restarting", "stopped", "failed"]

# How often start-up polls a replica that is loading its model.
_READY_POLL_SECONDS = 0.1
# A load report older than this many poll intervals is unknown (the engine stopped answering).
_STALE_POLLS = 4


@dataclass
class Replica:
    index: int
    port: int
    base_url: str
    model: str
    state: ReplicaState = "starting"
    pid: int | None = None
    # When the current process was spawned, on the supervisor's clock.
    started_at: float | None = None
    restarts: int = 0


class EngineSupervisor:
    def __init__(
        self,
        cfg: EngineConfig,
        *,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
        health_interval: float = 2.0,
        health_timeout: float = 5.0,
        unhealthy_after: int = 3,
        stop_grace: float = 5.0,
        load_interval: float = 0.5,
        output_level: int = logging.INFO,
        environ: Mapping[str, str] | None = None,
        cache_dir: Path | None = None,
        kinds: Mapping[str, EngineKind] = ENGINE_KINDS,
    ) -> None:
        self._cfg = cfg
        self._log = logger or logging.getLogger(f"providers.engines.{cfg.name}")
        self._clock = clock
        self._health_interval = health_interval
        self._health_timeout = health_timeout
        self._unhealthy_after = unhealthy_after
        self._stop_grace = stop_grace
        self._load_interval = load_interval
        self._output_level = output_level
        self._cache_dir = cache_dir
        # `kinds` is a seam for tests (a fake engine); "external" has no entry, hence no process.
        self._kind: EngineKind | None = kinds.get(cfg.kind)
        self._env = engine_environment(self._kind, os.environ if environ is None else environ) if self._kind else {}
        self._model_arg = cfg.model
        self._processes: dict[int, EngineProcess] = {}
        self._watchers: list[asyncio.Task[None]] = []
        self._loads: dict[int, EngineLoad] = {}
        self._client: httpx.AsyncClient | None = None
        self._started = False
        self._stopping: asyncio.Future[None] | None = None
        self.replicas: list[Replica] = self._plan_replicas()

    def _plan_replicas(self) -> list[Replica]:
        cfg = self._cfg
        if self._kind is None:
            assert cfg.url is not None  # EngineConfig requires it for kind "external"
            return [Replica(0, urlsplit(cfg.url).port or 0, cfg.url.rstrip("/"), cfg.served_model_name)]
        if cfg.base_port == 0:
            ports = free_ports(cfg.host, cfg.replicas)
        else:
            ports = [cfg.base_port + i for i in range(cfg.replicas)]
            if ports[-1] > 65535:
                raise EngineStartError(f"engine {cfg.name}: base_port {cfg.base_port} + {cfg.replicas} replicas exceeds 65535")
        return [Replica(i, port, base_url(cfg.host, port), cfg.served_model_name) for i, port in enumerate(ports)]

    def is_ready(self, index: int) -> bool:
        return self.replicas[index].state == "ready"

    def load(self, index: int) -> EngineLoad | None:
        """Replica `index`'s own report of its load, if it is ready and the report is fresh."""
        load = self._loads.get(index)
        if load is None or not self.is_ready(index) or self._clock() - load.read_at > _STALE_POLLS * self._load_interval:
            return None
        return load

    async def __aenter__(self) -> EngineSupervisor:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        if self._started:
            raise RuntimeError(f"engine {self._cfg.name} was already started")
        self._started = True
        self._client = httpx.AsyncClient(timeout=self._health_timeout, trust_env=False)
        try:
            if self._kind is None:
                await self._probe_external()
            else:
                await self._start_local(self._kind)
        except BaseException:
            await self.stop()
            raise
        self._watchers = [
            asyncio.create_task(self._watch(r), name=f"engine {self._cfg.name}#{r.index} watcher") for r in self.replicas
        ]
        read = self._kind.read_load if self._kind is not None else None
        if read is not None:
            self._watchers += [
                asyncio.create_task(self._poll_load(r, read), name=f"engine {self._cfg.name}#{r.index} load")
                for r in self.replicas
            ]

    async def _start_local(self, kind: EngineKind) -> None:
        cfg = self._cfg
        if (missing := missing_requirement(kind, cfg.name, self._env)) is not None:
            raise EngineStartError(missing)
        # Assembling a shipped model can read a few hundred MB; keep the loop free meanwhile.
        self._model_arg = await asyncio.to_thread(resolve_model, cfg, cache_dir=self._cache_dir)
        busy = [r.port for r in self.replicas if port_in_use(cfg.host, r.port)]
        if busy:
            raise EngineStartError(f"engine {cfg.name}: port {busy[0]} is already in use")
        try:
            async with asyncio.TaskGroup() as group:
                for replica in self.replicas:
                    group.create_task(self._launch(replica))
        except* EngineStartError as failed:
            raise failed.exceptions[0] from None

    async def _probe_external(self) -> None:
        # An external engine is not ours to start: the gateway comes up and routes around it until it answers.
        replica = self.replicas[0]
        replica.state = "ready" if await self._answers(replica.base_url + "/models") else "failed"
        if replica.state == "failed":
            self._log.warning("engine %s: external engine at %s does not answer yet", self._cfg.name, replica.base_url)

    async def _launch(self, replica: Replica) -> None:
        """Spawn `replica`'s process and return once it answers; on failure it is killed again."""
        assert self._kind is not None
        cfg = self._cfg
        argv = self._kind.build(cfg, port=replica.port, model=self._model_arg, cpu_count=os.cpu_count() or 1)
        try:
            process = await EngineProcess.spawn(
                argv,
                env=self._env,
                prefix=f"[engine {cfg.name}#{replica.index}]",
                logger=self._log,
                level=self._output_level,
                parse=self._kind.parse_output,
            )
        except OSError as exc:
            raise EngineStartError(f"engine {cfg.name}: cannot run {argv[0]}: {exc.strerror or exc}") from None
        self._processes[replica.index] = process
        replica.pid, replica.started_at = process.pid, self._clock()
        try:
            await self._wait_ready(replica, process)
        except EngineStartError:
            await process.terminate(self._stop_grace)
            raise
        replica.state = "ready"

    async def _wait_ready(self, replica: Replica, process: EngineProcess) -> None:
        cfg = self._cfg
        deadline = self._clock() + cfg.ready_timeout
        exited = asyncio.ensure_future(process.wait())
        try:
            while True:
                answered = await self._answers(replica.base_url + "/models")
                # Checked after the probe: a dead replica's port may be answered by someone else.
                if exited.done():
                    await process.output_done(timeout=2.0)
                    detail = process.last_telling_line() or "no output"
                    raise EngineStartError(
                        f"engine {cfg.name} replica {replica.index} exited with code {process.returncode}"
                        f" before it was ready: {detail}"
                    )
                if answered:
                    return
                remaining = deadline - self._clock()
                if remaining <= 0:
                    raise EngineStartError(
                        f"engine {cfg.name} replica {replica.index} was not ready within {cfg.ready_timeout:g}s"
                    )
                await asyncio.wait({exited}, timeout=min(_READY_POLL_SECONDS, remaining))
        finally:
            exited.cancel()

    async def _watch(self, replica: Replica) -> None:
        failures = 0
        attempt = 0  # consecutive restarts; drives the backoff
        while True:
            process = self._processes.get(replica.index)
            if await self._alive(replica, process):
                failures = 0
                if process is None:
                    replica.state = "ready"
                elif attempt and self._clock() - (replica.started_at or 0.0) >= self._cfg.restart_backoff_max:
                    attempt = 0  # stable again: the next crash restarts quickly
                await self._sleep_unless_exit(process, self._health_interval)
                continue
            failures += 1
            if process is None:
                replica.state = "failed"
            elif process.returncode is not None or failures >= self._unhealthy_after:
                await self._restart(replica, process, attempt)
                attempt, failures = attempt + 1, 0
                continue
            await self._sleep_unless_exit(process, self._health_interval)

    async def _poll_load(self, replica: Replica, read: LoadReader) -> None:
        """Keep `replica`'s load report fresh; a report that cannot be read is unknown, never fatal."""
        assert self._client is not None
        root = replica.base_url.removesuffix("/v1")
        complained = False
        while True:
            if replica.state == "ready":
                try:
                    load = await read(self._client, root, self._clock())
                except Exception as exc:  # noqa: BLE001 - the engine's answers must not stop this loop
                    self._loads.pop(replica.index, None)
                    if not complained:
                        self._log.warning("engine %s#%d: cannot read its load: %s", self._cfg.name, replica.index, exc)
                    complained = True
                else:
                    self._loads[replica.index] = load
                    complained = False
            await asyncio.sleep(self._load_interval)

    async def _restart(self, replica: Replica, process: EngineProcess, attempt: int) -> None:
        cfg = self._cfg
        replica.state = "restarting"
        reason = f"exited with code {process.returncode}" if process.returncode is not None else "stopped answering"
        delay = min(cfg.restart_backoff_initial * 2**attempt, cfg.restart_backoff_max)
        self._log.warning("engine %s#%d %s; restarting in %gs", cfg.name, replica.index, reason, delay)
        await process.terminate(self._stop_grace)
        await asyncio.sleep(delay)
        replica.restarts += 1
        try:
            await self._launch(replica)
        except EngineStartError as exc:
            self._log.warning("%s", exc)
            return
        self._log.info("engine %s#%d is ready again (pid %d)", cfg.name, replica.index, replica.pid)

    async def _alive(self, replica: Replica, process: EngineProcess | None) -> bool:
        if process is None:
            return await self._answers(replica.base_url + "/models")
        if process.returncode is not None:
            return False
        assert self._kind is not None
        return await self._answers(replica.base_url.removesuffix("/v1") + self._kind.liveness_path)

    async def _answers(self, url: str) -> bool:
        assert self._client is not None
        try:
            response = await self._client.get(url)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def _sleep_unless_exit(self, process: EngineProcess | None, seconds: float) -> None:
        if process is None or process.returncode is not None:
            await asyncio.sleep(seconds)
            return
        exited = asyncio.ensure_future(process.wait())
        try:
            await asyncio.wait({exited}, timeout=seconds)
        finally:
            exited.cancel()

    async def stop(self) -> None:
        """Stop watching and terminate every replica; safe to call more than once."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop())
        await asyncio.shield(self._stopping)

    async def _stop(self) -> None:
        for watcher in self._watchers:
            watcher.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        await asyncio.gather(*(p.terminate(self._stop_grace) for p in self._processes.values()))
        for replica in self.replicas:
            replica.state = "stopped"
        if self._client is not None:
            await self._client.aclose()
