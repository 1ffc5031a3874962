"""`POST /admin/api/probes/run` and `gwctl probe` over a gateway app whose probes are fakes that
call the (mock) upstream through the real `ProbeClient`: NDJSON progress, the summary, OpenAI-style
errors, the table, --json, and the exit codes (0 healthy, 1 degraded, 2 usage/connection)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.catalog import Endpoint
from gateway.cli.gwctl import main
from gateway.cli.probe import Progress, table
from gateway.http.admin_openapi import openapi
from gateway.state import AppState
from probes.base import Effect, ProbeContext, ProbeResult, Verdict
from probes.registry import ProbeRegistry
from probes.stats.evalues import calibrate_mixture
from providers.http_mock import MockHTTPClient
from tests.gateway.persistence.app_helpers import ADMIN, ADMIN_KEY, answer, settings


def fake_probe(probe_name: str, verdict: Verdict, probe_effect: Effect = "evidence") -> type:
    class Fake:
        name: ClassVar[str] = probe_name
        effect: ClassVar[Effect] = probe_effect

        def applicable(self, endpoint: Endpoint) -> str | None:
            return None

        async def run(self, ctx: ProbeContext) -> ProbeResult:
            await ctx.client.chat({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1})
            ctx.progress(1, 1)
            p = 0.001 if verdict == "fail" else 0.6
            return ProbeResult(self.name, verdict, 1, statistic=0.25, p_value=p, e_value=10.5 if p < 0.05 else 0.5,
                               effect=self.effect, tokens_spent=1100)

    return Fake


@pytest.fixture
def upstream() -> MockHTTPClient:
    return MockHTTPClient(answer)


@pytest.fixture
def client(tmp_path: Path, upstream: MockHTTPClient) -> Iterator[TestClient]:
    app = create_app(settings(tmp_path, None), client_factory=lambda: upstream)
    with TestClient(app) as c:
        state: AppState = c.app_state["gw"]
        state.probes.registry = ProbeRegistry(
            {"logprob_drift": fake_probe("logprob_drift", "pass"), "fidelity": fake_probe("fidelity", "fail")},
            suites={"quality": ("logprob_drift",)},
        )
        yield c


def ndjson(client: TestClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    with client.stream("POST", "/admin/api/probes/run", json=body, headers=ADMIN) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("application/x-ndjson")
        return [json.loads(line) for line in response.iter_lines() if line]


def test_an_audit_streams_progress_then_the_summary(client: TestClient, upstream: MockHTTPClient) -> None:
    events = ndjson(client, {"provider": "p"})
    kinds = [e["event"] for e in events]
    assert kinds == ["started", "probe", "progress", "result", "finished", "summary"]
    summary = events[-1]
    assert summary["verdict"] == "pass" and summary["probes"] == ["logprob_drift"]
    (run,) = summary["runs"]
    assert (run["endpoint"], run["state"], run["transitions"]) == ("p/m", "healthy", [])
    assert run["results"][0]["p_value"] == 0.6 and run["tokens"] == 1100
    # Sent straight to the endpoint (not through routing), with nothing that names a probe.
    (sent,) = upstream.requests
    assert sent.url.startswith("http://p.test/v1") and not any("probe" in k.lower() for k in sent.headers)


def test_a_failing_audit_demotes_and_says_so(client: TestClient) -> None:
    events = ndjson(client, {"provider": "p", "model": "m", "probes": ["fidelity"]})
    assert [e["to"] for e in events if e["event"] == "transition"] == ["suspect", "demoted"]
    assert events[-1]["verdict"] == "fail" and events[-1]["runs"][0]["state"] == "demoted"
    health = client.get("/admin/api/health", headers=ADMIN).json()["data"]
    assert {h["endpoint"]: h["state"] for h in health}["p/m"] == "demoted"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"provider": "nope"}, 404, "provider_not_found"),
        ({"endpoint": "nope/m"}, 404, "endpoint_not_found"),
        ({"provider": "p", "model": "broken"}, 404, "endpoint_not_found"),
        ({"provider": "p", "probes": ["nope"]}, 400, "probe_not_found"),
        ({"provider": "p", "probes": "quality,nope"}, 400, "probe_not_found"),
        ({}, 400, None),
        ({"provider": 3}, 400, None),
    ],
)
def test_bad_requests_get_openai_errors(client: TestClient, body: dict[str, Any], status: int, code: str | None) -> None:
    response = client.post("/admin/api/probes/run", json=body, headers=ADMIN)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["message"] and error["code"] == code


def test_the_route_needs_the_admin_key_and_is_described(client: TestClient) -> None:
    assert client.post("/admin/api/probes/run", json={"provider": "p"}).status_code == 401
    assert "post" in openapi()["paths"]["/admin/api/probes/run"]


def test_the_fleet_route_reports_the_round_s_false_discovery_control(client: TestClient) -> None:
    """After an audit whose fidelity fails twice (p = 0.001: e = 20.8 a round with the default
    calibrator), the round's figures."""
    body = {"provider": "p", "probes": ["fidelity"]}
    with client.stream("POST", "/admin/api/probes/run", json=body, headers=ADMIN) as response:
        events = [json.loads(line) for line in response.iter_lines() if line]
    assert events[-1]["event"] == "summary"
    fleet = client.get("/admin/api/probes/fleet", headers=ADMIN)
    assert fleet.status_code == 200 and fleet.headers["cache-control"] == "no-store"
    doc = fleet.json()
    assert (doc["object"], doc["method"], doc["alpha"]) == ("probe.fleet", "e-BH", 0.1)
    (row,) = [r for r in doc["endpoints"] if r["proposed"]]
    assert row["e_value"] == pytest.approx(calibrate_mixture(0.001) ** 2)
    # Two endpoints in the catalog at FDR 0.1: the bar is 2 / (0.1 * 1) = 20 <= 432, so it is demoted.
    assert (doc["n"], doc["k"], doc["threshold"], doc["demoted"], doc["held"]) == (2, 1, 20.0, 1, 0)
    assert any(e["event"] == "transition" and e["to"] == "demoted" and "e-BH" in e["reason"] for e in events)
    assert client.get("/admin/api/probes/fleet").status_code == 401
    assert "get" in openapi()["paths"]["/admin/api/probes/fleet"]


# -- gwctl probe ------------------------------------------------------------------------------


@pytest.fixture
def gwctl(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`gwctl probe` with its HTTP calls going to the in-process app. The CLI speaks httpx; the
    TestClient may be built on httpx2 (starlette prefers it when installed, and the SDKs now pull it
    in), whose `stream` rejects an `httpx.Timeout`: its four limits travel as a tuple, which both take."""

    def stream(method: str, url: str, *, timeout: httpx.Timeout, **kwargs: Any) -> Any:
        assert isinstance(timeout, httpx.Timeout) and timeout.connect == 10.0
        limits = (timeout.connect, timeout.read, timeout.write, timeout.pool)
        return client.stream(method, url, timeout=limits, **kwargs)

    monkeypatch.setattr("gateway.cli.probe.httpx.stream", stream)

    def run(*args: str) -> int:
        return main(["probe", "--url", "http://testserver", "--admin-key", ADMIN_KEY, *args])

    return run


def test_cli_healthy_prints_the_table_and_exits_0(gwctl: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert gwctl("--provider", "p") == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == "p/m (m, p)"
    assert lines[1].split() == ["probe", "statistic", "p/e", "samples", "tokens", "verdict"]
    assert lines[2].split() == ["logprob_drift", "0.25", "p=0.6", "1", "1100", "pass"]
    assert "now HEALTHY" in out
    assert "p/m: logprob_drift -> pass" in err and "\r" not in err  # not a terminal: plain lines


def test_cli_degraded_exits_1_with_the_transitions(gwctl: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert gwctl("--provider", "p", "--probes", "fidelity") == 1
    out, _ = capsys.readouterr()
    assert "state: healthy -> suspect" in out and "state: suspect -> demoted" in out and "now DEMOTED" in out
    assert "fidelity (confirm)" in out


def test_cli_json_prints_the_summary(gwctl: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert gwctl("--endpoint", "p/m", "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["object"] == "probe.audit" and summary["runs"][0]["endpoint"] == "p/m"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--provider", "nope"], "404 No provider `nope`"),
        (["--provider", "p", "--probes", "nope"], "400 unknown probe or suite `nope`"),
        ([], "say what to probe"),
    ],
)
def test_cli_usage_errors_exit_2(gwctl: Any, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    assert gwctl(*args) == 2
    assert message in capsys.readouterr().err


def test_cli_unreachable_gateway_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--provider", "p", "--url", "http://127.0.0.1:9"]) == 2
    assert "cannot reach the gateway at http://127.0.0.1:9" in capsys.readouterr().err


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_a_bar_on_a_terminal() -> None:
    out = Tty()
    progress = Progress(out)
    progress.event({"event": "progress", "endpoint": "p/m", "probe": "fidelity", "done": 5, "total": 10})
    progress.event({"event": "result", "endpoint": "p/m", "probe": "fidelity", "verdict": "pass"})
    text = out.getvalue()
    assert text.startswith("\rp/m fidelity") and "[" + "#" * 15 + "-" * 15 + "] 5/10" in text
    assert text.endswith("\r\x1b[Kp/m: fidelity -> pass\n")


def test_the_template_check_and_a_probe_out_of_time_are_shown() -> None:
    out = io.StringIO()
    Progress(out).event({"event": "template", "endpoint": "p/m", "reference": "local/m", "status": "differs",
                         "reason": "template differs: the endpoint reports [55] prompt tokens where ..."})
    assert out.getvalue() == "p/m: template differs: the endpoint reports [55] prompt tokens where ... (reference local/m)\n"
    run = {"endpoint": "p/m", "model": "m", "provider": "p", "state": "healthy", "verdict": "pass", "tokens": 10,
           "transitions": [], "template": {"status": "differs", "reason": "template differs: ..."},
           "results": [{"probe": "toolcalls", "statistic": 0.0, "p_value": None, "samples": 4, "tokens": 10,
                        "verdict": "inconclusive", "details": {"reason": "time ran out: 4 of 120 cases answered"}}]}
    text = table(run)
    assert "inconclusive: time ran out: 4 of 120 cases answered" in text
    assert "  reference not compared with: template differs: ..." in text
