"""The official Anthropic Node SDK (`@anthropic-ai/sdk`), unchanged but for `baseURL`, against the
gateway's /v1/messages in front of the fake Chat Completions upstream: a stream, a streamed tool
call reassembled by its stream helper, a tool round trip, typed errors and a stream cut midway.
`node/anthropic_check.mjs` runs every check once and prints the outcomes as JSON."""

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
TEXT = REPLY_PREFIX + "hello there"
WEATHER_ARGS = {"city": "city-value", "unit": "celsius"}


@pytest.fixture(scope="module")
def outcomes(gateway: GatewayServer) -> dict[str, Any]:
    node = shutil.which("node")
    assert node is not None, "Node.js is missing: scripts/test.sh installs it"
    assert (NODE_DIR / "node_modules" / "@anthropic-ai" / "sdk").is_dir(), "the SDK is missing: run `npm ci` in tests/e2e/node"
    done = subprocess.run(
        [node, str(NODE_DIR / "anthropic_check.mjs"), gateway.root, GATEWAY_KEY], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def ok(outcomes: dict[str, Any], name: str) -> Any:
    assert "error" not in outcomes[name], outcomes[name]
    return outcomes[name]["ok"]


def test_create_and_stream(outcomes: dict[str, Any]) -> None:
    created = ok(outcomes, "create")
    assert (created["type"], created["text"], created["stop"]) == ("message", TEXT, "end_turn")
    streamed = ok(outcomes, "stream")
    assert streamed["text"] == streamed["finalText"] == TEXT and streamed["stop"] == "end_turn"
    assert streamed["usage"]["input_tokens"] == created["usage"]["input_tokens"]
    assert streamed["usage"]["output_tokens"] == created["usage"]["output_tokens"] > 0


def test_a_streamed_tool_call_is_reassembled_by_the_stream_helper(outcomes: dict[str, Any]) -> None:
    result = ok(outcomes, "toolStream")
    assert result["pieces"] >= 3
    assert result["input"] == result["wholeInput"] == WEATHER_ARGS
    assert result["stop"] == "tool_use" and result["id"]


def test_a_tool_round_trip(outcomes: dict[str, Any]) -> None:
    result = ok(outcomes, "toolRoundTrip")
    assert (result["firstStop"], result["secondStop"]) == ("tool_use", "end_turn")
    assert result["text"] == REPLY_PREFIX + "weather?"


def test_typed_errors(outcomes: dict[str, Any]) -> None:
    missing = outcomes["missingMaxTokens"]["error"]
    assert (missing["class"], missing["status"], missing["type"]) == ("BadRequestError", 400, "invalid_request_error")
    assert "max_tokens" in missing["message"]
    bad = outcomes["badKey"]["error"]
    assert (bad["class"], bad["status"], bad["type"]) == ("AuthenticationError", 401, "authentication_error")


def test_a_stream_cut_midway_raises_and_never_looks_finished(outcomes: dict[str, Any]) -> None:
    result = ok(outcomes, "cutStream")
    assert result["error"] is not None and result["error"]["isAPIError"]
    assert "message_start" in result["seen"] and "message_stop" not in result["seen"]
