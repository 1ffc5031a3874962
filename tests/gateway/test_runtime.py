"""The composition root: everything starts in dependency order (local engines first) and closes in
reverse (engines last); a failed start closes what had started; collaborators are wired at
construction (the tool-call monitor's confirmations run the state's probe runner)."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import pytest

from gateway.config import Settings, load_config
from gateway.runtime import Runtime
from gateway.state_store.memory import MemoryStore
from kernel.tasks import Drain
from probes.toolcalls.passive import SOURCE as TOOL_MONITOR
from providers.engines.errors import EngineStartError
from providers.http_mock import MockHTTPClient, MockResponse


def settings(**overrides: Any) -> Settings:
    return load_config(
        environ={},
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p"}],
        **overrides,
    )


def running() -> set[str]:
    return {t.get_name() for t in asyncio.all_tasks() if not t.done()}


class Engine:
    def __init__(self, name: str, events: list[str], *, fails: bool = False) -> None:
        self.name, self.events, self.fails = name, events, fails

    async def start(self) -> None:
        self.events.append(f"start {self.name}")
        if self.fails:
            raise RuntimeError(f"engine {self.name} did not start")

    async def stop(self) -> None:
        self.events.append(f"stop {self.name}")


class Client(MockHTTPClient):
    def __init__(self, events: list[str]) -> None:
        super().__init__(lambda request: MockResponse(200))
        self.events = events

    async def aclose(self) -> None:
        self.events.append("close client")
        await super().aclose()


class Store(MemoryStore):
    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.events = events

    async def aclose(self) -> None:
        # The scheduler and the sync loop are gone by the time the store closes.
        self.events.append(f"close store; running: {sorted(running() & {'probe-scheduler', 'state-sync'})}")
        await super().aclose()


async def test_start_in_dependency_order_close_in_reverse_engines_last() -> None:
    events: list[str] = []
    engines = [Engine("a", events), Engine("b", events)]

    def client() -> Client:
        events.append("make client")
        return Client(events)

    runtime = Runtime(settings(probes={"enabled": True}), client_factory=client, engines=engines, store=Store(events))
    async with runtime as started:
        assert started is runtime
        assert events == ["start a", "start b", "make client"]
        assert {"probe-scheduler", "state-sync"} <= running()
        assert runtime.scheduler is not None
        state = runtime.state
    assert events[3:] == ["close store; running: []", "close client", "stop b", "stop a"]
    assert state.client.closed  # type: ignore[attr-defined]


async def test_a_failed_start_closes_what_had_started() -> None:
    events: list[str] = []
    engines = [Engine("a", events), Engine("b", events, fails=True), Engine("c", events)]
    with pytest.raises(RuntimeError, match="engine b did not start"):
        async with Runtime(settings(), client_factory=lambda: Client(events), engines=engines):
            pytest.fail("a runtime whose engine did not start does not run")
    assert events == ["start a", "start b", "stop c", "stop b", "stop a"]  # no client was made


class LoadingEngine(Engine):
    """An engine whose model takes forever to load."""

    def __init__(self, events: list[str]) -> None:
        super().__init__("slow", events)
        self.loading = asyncio.Event()

    async def start(self) -> None:
        self.events.append("start slow")
        self.loading.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.events.append("start slow cancelled")
            raise


async def test_a_signal_while_an_engine_starts_abandons_the_start_and_stops_it() -> None:
    events: list[str] = []
    engine = LoadingEngine(events)
    drain = Drain()
    runtime = Runtime(settings(), client_factory=lambda: Client(events), engines=[engine], drain=drain)

    async def signal_once_loading() -> None:
        await engine.loading.wait()
        drain.begin()  # what `gwctl serve`'s server does on SIGTERM/SIGINT

    signal = asyncio.create_task(signal_once_loading())
    with pytest.raises(EngineStartError, match="told to stop while the local engines were starting"):
        async with asyncio.timeout(60):  # a safety net only: the drain ends it
            async with runtime:
                pytest.fail("a runtime told to stop while starting does not run")
    await signal
    assert events == ["start slow", "start slow cancelled", "stop slow"]  # no client was made


async def test_collaborators_are_wired_at_construction() -> None:
    async with Runtime(settings(), client_factory=lambda: Client([])) as runtime:
        state = runtime.state
        assert runtime.scheduler is None  # probes.enabled is off
        assert state.router is not None and state.router.admit_keys is False  # the limits stage admits keys
        confirm = state.tool_monitor.confirm if state.tool_monitor else None
        assert isinstance(confirm, partial) and state.probes is not None
        assert confirm.func == state.probes.run and confirm.keywords == {
            "probes": ["toolcalls"],
            "trigger": TOOL_MONITOR,
        }
