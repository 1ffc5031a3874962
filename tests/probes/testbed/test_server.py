"""The server's HTTP surface and control API, in-process over a fake model service."""

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from probes.testbed.backends import ModelError
from probes.testbed.endpoints import EndpointSpec
from probes.testbed.faults import Draws, FaultSpec
from probes.testbed.server import ServedEndpoints, create_app
from probes.testbed.wire import ChatRequest, CompletionRequest


class FakeService:
    """Answers without a model: touches every fault the request's spec sets."""

    def __init__(self) -> None:
        self.prepared: list[FaultSpec] = []
        self.draws: list[Draws] = []

    def prepare(self, base: str, spec: FaultSpec) -> None:
        if spec.substitute == "missing-model":
            raise ModelError("unknown model 'missing-model'")
        self.prepared.append(spec)

    def chat(self, base: str, served: str, req: ChatRequest, draws: Draws) -> tuple[dict[str, Any], set[str]]:
        self.draws.append(draws)
        body = {"object": "chat.completion", "model": served, "choices": [{"message": {"content": "hi"}}]}
        return body, set(draws.spec.active())

    def completion(
        self, base: str, served: str, req: CompletionRequest, draws: Draws
    ) -> tuple[dict[str, Any], set[str]]:
        self.draws.append(draws)
        return {"object": "text_completion", "model": served, "choices": [{"text": "hi"}]}, set(draws.spec.active())


@pytest.fixture
def service() -> FakeService:
    return FakeService()


@pytest.fixture
async def client(service: FakeService) -> AsyncIterator[httpx.AsyncClient]:
    endpoints = ServedEndpoints(
        [EndpointSpec("honest"), EndpointSpec("noisy", fault={"logit_noise": 0.5, "seed": 1})], service  # type: ignore[arg-type]
    )
    transport = httpx.ASGITransport(app=create_app(endpoints))
    async with httpx.AsyncClient(transport=transport, base_url="http://testbed") as c:
        yield c


CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}


async def test_chat_and_completions_are_served_per_endpoint(client: httpx.AsyncClient) -> None:
    r = await client.post("/honest/v1/chat/completions", json=CHAT)
    assert r.status_code == 200 and r.json()["model"] == "smollm2"
    r = await client.post("/noisy/v1/completions", json={"prompt": "x", "max_tokens": 1})
    assert r.status_code == 200 and r.json()["object"] == "text_completion"
    r = await client.get("/noisy/v1/models")
    assert r.json()["data"][0]["id"] == "smollm2"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({**CHAT, "stream": True}, "stream"),
        ({**CHAT, "n": 2}, "n"),
        ({**CHAT, "messages": []}, "messages"),
        ({**CHAT, "top_logprobs": 5}, "top_logprobs"),
        ({**CHAT, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({**CHAT, "temperature": 3}, "temperature"),
        ({**CHAT, "max_tokens": 0}, "max_tokens"),
        ({**CHAT, "tools": [{"type": "function"}]}, "tools"),
    ],
)
async def test_bad_requests_get_openai_errors(client: httpx.AsyncClient, body: dict, param: str) -> None:
    r = await client.post("/honest/v1/chat/completions", json=body)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["message"]


async def test_unknown_endpoint_and_route_are_404(client: httpx.AsyncClient) -> None:
    r = await client.post("/nobody/v1/chat/completions", json=CHAT)
    assert r.status_code == 404 and "nobody" in r.json()["error"]["message"]
    r = await client.get("/honest/v2/whatever")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = await client.post("/honest/v1/chat/completions", content=b"{not json")
    assert r.status_code == 400


async def test_control_api_sets_clears_and_counts(client: httpx.AsyncClient, service: FakeService) -> None:
    listed = (await client.get("/_testbed/endpoints")).json()["data"]
    assert {e["name"]: e["fault"] for e in listed} == {"honest": {}, "noisy": {"logit_noise": 0.5, "seed": 1}}
    r = await client.put("/_testbed/endpoints/honest/fault", json={"tool_corruption": {"rate": 0.5}, "seed": 3})
    assert r.status_code == 200 and r.json()["fault"]["tool_corruption"]["rate"] == 0.5
    assert service.prepared[-1].tool_corruption is not None
    for _ in range(40):
        await client.post("/honest/v1/chat/completions", json=CHAT)
    counts = (await client.get("/_testbed/endpoints")).json()["data"][0]["counts"]
    assert counts["requests"] == 40 and counts["tool_corruption"] == 40
    drawn = sum(d.corruption is not None for d in service.draws)
    assert 10 <= drawn <= 30  # the per-request draw follows the rate
    cleared = (await client.put("/_testbed/endpoints/honest/fault", json={})).json()
    assert cleared["fault"] == {} and cleared["counts"] == {}
    assert (await client.get("/_testbed/health")).json()["status"] == "ok"


async def test_partial_share_is_counted(client: httpx.AsyncClient) -> None:
    fault = {"partial": {"share": 0.5, "fault": {"logit_noise": 1}}, "seed": 5}
    await client.put("/_testbed/endpoints/honest/fault", json=fault)
    for _ in range(60):
        await client.post("/honest/v1/chat/completions", json=CHAT)
    counts = (await client.get("/_testbed/endpoints")).json()["data"][0]["counts"]
    assert counts["requests"] == 60 and 18 <= counts["partial"] <= 42
    assert counts["logit_noise"] == counts["partial"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"logit_noise": "lots"}, "fault.logit_noise"),
        ({"shuffle": True}, "fault.shuffle: unknown key"),
        ({"substitute": "missing-model"}, "missing-model"),
        ([1], "JSON object"),
    ],
)
async def test_control_api_rejects_a_bad_spec(client: httpx.AsyncClient, body: object, needle: str) -> None:
    r = await client.put("/_testbed/endpoints/honest/fault", json=body)
    assert r.status_code == 400
    assert needle in r.json()["error"]["message"]
    listed = (await client.get("/_testbed/endpoints")).json()["data"]
    assert listed[0]["fault"] == {}  # unchanged


async def test_fault_for_unknown_endpoint_is_404(client: httpx.AsyncClient) -> None:
    r = await client.put("/_testbed/endpoints/nobody/fault", json={})
    assert r.status_code == 404
