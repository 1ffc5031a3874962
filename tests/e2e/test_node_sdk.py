"""The official `openai` Node SDK, unchanged but for `baseURL`, against the gateway.

`node/sdk_check.mjs` runs every check once and prints the outcomes as JSON; each test here asserts
on one of them, the way the Python SDK tests do. scripts/test.sh installs Node.js and the pinned
SDK (`npm ci` in tests/e2e/node) before the suite runs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import GATEWAY_KEY
from tests.fakes.openai_upstream import REPLY_PREFIX
from tests.fakes.servers import GatewayServer

NODE_DIR = Path(__file__).resolve().parent / "node"
WEATHER_ARGS = {"city": "city-value", "unit": "celsius"}
TEXT = REPLY_PREFIX + "hello there"
ANY_CODE = object()


@pytest.fixture(scope="module")
def outcomes(gateway: GatewayServer) -> dict[str, Any]:
    node = shutil.which("node")
    assert node is not None, "Node.js is missing: scripts/test.sh installs it"
    assert (NODE_DIR / "node_modules" / "openai").is_dir(), "the Node SDK is missing: run `npm ci` in tests/e2e/node"
    done = subprocess.run(
        [node, str(NODE_DIR / "sdk_check.mjs"), gateway.url, GATEWAY_KEY],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def ok(outcomes: dict[str, Any], name: str) -> Any:
    outcome = outcomes[name]
    assert "error" not in outcome, outcome
    return outcome["ok"]


def error(outcomes: dict[str, Any], name: str) -> dict[str, Any]:
    outcome = outcomes[name]
    assert "error" in outcome, f"{name} did not raise: {outcome}"
    assert outcome["error"]["isAPIError"], outcome
    return dict(outcome["error"])


def test_chat(outcomes: dict[str, Any]) -> None:
    r = ok(outcomes, "chat")
    assert r["object"] == "chat.completion"
    assert r["model"] == "chat-model"
    assert r["content"] == TEXT
    assert r["finish"] == "stop"
    assert r["usage"]["total_tokens"] == r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"]


def test_gateway_headers_reach_the_sdk(outcomes: dict[str, Any]) -> None:
    r = ok(outcomes, "chatWithResponse")
    assert r["content"] == TEXT
    assert r["requestId"].startswith("req_")
    assert r["endpoint"] == "fake-a/chat-model"
    assert r["attempts"] == "1"


def test_streaming(outcomes: dict[str, Any]) -> None:
    r = ok(outcomes, "stream")
    assert r["objects"] == ["chat.completion.chunk"]
    assert r["models"] == ["chat-model"]
    assert r["text"] == TEXT
    assert r["finish"] == "stop"
    assert r["usage"] is False  # not asked for: the gateway strips the usage it requested upstream


def test_streaming_include_usage(outcomes: dict[str, Any]) -> None:
    r = ok(outcomes, "streamUsage")
    assert r["lastChoices"] == 0
    assert r["usage"]["completion_tokens"] == 4


def one_weather_call(r: dict[str, Any]) -> dict[str, str]:
    assert r["finish"] == "tool_calls"
    (call,) = r["calls"]
    assert call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == WEATHER_ARGS
    return dict(call)


def test_tool_call(outcomes: dict[str, Any]) -> None:
    assert one_weather_call(ok(outcomes, "toolCall"))["id"].startswith("call_")


def test_stream_helper_reassembles_tool_call_deltas(outcomes: dict[str, Any]) -> None:
    r = ok(outcomes, "streamToolCall")
    one_weather_call(r)
    assert r["chunks"] > 3  # the arguments arrived in fragments


def test_logprobs(outcomes: dict[str, Any]) -> None:
    r = ok(outcomes, "logprobs")
    assert r["tokens"] == r["text"] == TEXT
    assert set(r["tops"]) == {3}
    assert r["maxLogprob"] <= 0


def test_completion(outcomes: dict[str, Any]) -> None:
    r = ok(outcomes, "completion")
    assert r["object"] == "text_completion"
    assert r["model"] == "chat-model"
    assert r["text"]


def test_embeddings_decoded_from_base64(outcomes: dict[str, Any]) -> None:
    r = ok(outcomes, "embeddings")
    assert r["object"] == "list"
    assert r["model"] == "embed-model"
    assert r["count"] == 2
    assert r["dims"][0] == r["dims"][1] > 0
    assert r["numbers"] is True
    assert r["usage"]["prompt_tokens"] > 0


def test_models(outcomes: dict[str, Any]) -> None:
    r = ok(outcomes, "models")
    assert "chat-model" in r["ids"] and "embed-model" in r["ids"]
    assert r["retrieved"] == "chat-model"
    assert r["object"] == "model"


@pytest.mark.parametrize(
    ("check", "cls", "status", "kind", "code"),
    [
        ("wrongKey", "AuthenticationError", 401, "invalid_request_error", "invalid_api_key"),
        ("unknownModel", "NotFoundError", 404, "invalid_request_error", "model_not_found"),
        ("unknownModelRetrieve", "NotFoundError", 404, "invalid_request_error", "model_not_found"),
        ("missingMessages", "BadRequestError", 400, "invalid_request_error", None),
        ("wrongType", "BadRequestError", 400, "invalid_request_error", None),
        ("unsupportedParameter", "BadRequestError", 400, "invalid_request_error", "unsupported_parameter"),
        ("rateLimited", "RateLimitError", 429, "rate_limit_error", "upstream_rate_limited"),
        # Which failure comes last (a 500 or a reset) depends on the order tried: the code is not fixed.
        ("allFailing", "InternalServerError", 502, "api_error", ANY_CODE),
    ],
)
def test_errors_are_the_sdks_typed_errors(
    outcomes: dict[str, Any], check: str, cls: str, status: int, kind: str, code: object
) -> None:
    e = error(outcomes, check)
    assert e["class"] == cls
    assert e["status"] == status
    assert e["type"] == kind
    if code is not ANY_CODE:
        assert e["code"] == code
    assert e["requestID"] and e["requestID"].startswith("req_")


def test_bad_parameters_name_the_parameter(outcomes: dict[str, Any]) -> None:
    assert error(outcomes, "missingMessages")["param"] == "messages"
    assert error(outcomes, "wrongType")["param"] == "temperature"
    assert error(outcomes, "unsupportedParameter")["param"] == "tools"


def test_stream_cut_midway_throws_after_the_first_chunks(outcomes: dict[str, Any]) -> None:
    r = ok(outcomes, "streamCut")
    assert r["chunks"] == 2
    assert r["firstRole"] == "assistant"
    assert r["error"] is not None, "the stream ended cleanly after the upstream broke"
    assert r["error"]["isAPIError"]
    assert r["error"]["status"] is None  # the status line said 200; the break came later
    assert r["error"]["type"] == "api_error"
    assert r["error"]["code"] == "upstream_stream_error"
