"""/readyz: ready while every model has an endpoint and every background loop keeps completing
rounds; a loop stuck (or failing on a bug) past its limit makes it unready and says which."""

from __future__ import annotations

import asyncio

import orjson
from starlette.requests import Request

from gateway.config import load_config
from gateway.http.health import readyz
from gateway.runtime import build_state
from kernel.tasks import LoopHealth
from providers.http_mock import MockHTTPClient, MockResponse
from tests.fakes.clock import FakeClock


def state_for_test() -> object:
    settings = load_config(
        environ={}, providers=[{"name": "p", "base_url": "http://p.test/v1"}], deployments=[{"model": "m", "provider": "p"}]
    )
    return build_state(settings, client=MockHTTPClient(lambda r: MockResponse(200)))


async def ask(state: object) -> tuple[int, dict[str, object]]:
    request = Request({"type": "http", "method": "GET", "path": "/readyz", "headers": [], "state": {"gw": state}})
    response = await readyz(request)
    return response.status_code, orjson.loads(response.body)


async def test_a_stale_background_loop_makes_the_gateway_unready() -> None:
    state = state_for_test()
    assert state.loops.loops["state_sync"] is state.shared.beat  # the loop /readyz watches is the real one
    clock = FakeClock()
    state.loops = LoopHealth(clock=clock)
    beat = state.loops.register("state_sync", 30)
    assert (await ask(state))[0] == 200
    clock.advance(31)
    status, body = await ask(state)
    assert status == 503 and body["status"] == "not_ready"
    assert body["background_stale"]["state_sync"]["limit_s"] == 30
    beat.ok()
    assert (await ask(state))[0] == 200


async def test_the_sync_loop_beats_while_it_runs() -> None:
    state = state_for_test()
    state.shared.start()
    try:
        async with asyncio.timeout(10):
            while state.shared.beat.last_success is None:
                await asyncio.sleep(0.01)
    finally:
        await state.shared.aclose()
    assert not state.loops.stale()
