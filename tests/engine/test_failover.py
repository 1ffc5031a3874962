"""kill -9 the engine mid-traffic, and the gateway itself by SIGTERM and SIGKILL.

- Two replicas: replica 0 is SIGKILLed while a request routed to it first is in flight and others
  run; every request still succeeds (that one on replica 1, after a second attempt), and the killed
  replica comes back (restarts == 1).
- One replica: a stream in flight ends with an error (never a clean end); requests during the
  restart get a 503 with an OpenAI error saying so; the engine serves again within
  RESTART_BOUND_S (measured on 2 cores with other work running: 2.5-3.9 s, of which 0.5 s is
  backoff and the rest the engine's start and model load).
- The gateway SIGTERMed exits 0 after stopping its engines; SIGKILLed, its engines die with it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import openai
import pytest

from tests.engine.conftest import MODEL, Gateway, alive, engine_processes, wait_until

pytestmark = pytest.mark.engine

RESTART_BOUND_S = 10.0
EXIT_BOUND_S = 15.0  # SIGTERM: uvicorn's graceful stop, then each engine gets SIGTERM (5 s grace)
SHORT = [{"role": "user", "content": "Name a colour."}]


@dataclass
class Outcome:
    started: float
    ended: float
    endpoint: str | None = None  # x-gateway-endpoint of a success
    status: int | None = None  # HTTP status of a failure
    error: dict[str, object] | None = None


class Traffic:
    """Threads sending short non-streamed chats in a loop until stopped."""

    def __init__(self, gateway: Gateway, threads: int = 2) -> None:
        self.outcomes: list[Outcome] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(gateway,), daemon=True) for _ in range(threads)]

    def __enter__(self) -> Traffic:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def _run(self, gateway: Gateway) -> None:
        with gateway.client() as client:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=SHORT, max_tokens=6)
                    raw.parse()
                    outcome = Outcome(started, time.monotonic(), endpoint=raw.headers.get("x-gateway-endpoint"))
                except openai.APIStatusError as exc:
                    body = exc.body if isinstance(exc.body, dict) else {"raw": exc.body}
                    outcome = Outcome(started, time.monotonic(), status=exc.status_code, error=body)
                except openai.APIError as exc:  # no HTTP answer at all
                    outcome = Outcome(started, time.monotonic(), status=-1, error={"message": str(exc)})
                with self._lock:
                    self.outcomes.append(outcome)
                if not outcome.endpoint:
                    time.sleep(0.05)  # a client pausing before it retries, not a busy loop

    def successes(self, since: float = 0.0) -> list[Outcome]:
        with self._lock:
            return [o for o in self.outcomes if o.endpoint and o.started >= since]


def kill_replica(gateway: Gateway, index: int) -> tuple[int, float]:
    pid = gateway.replicas()[index]["pid"]
    os.kill(pid, signal.SIGKILL)
    return pid, time.monotonic()


# -- two replicas: fall back to the other one --------------------------------------------


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = Gateway(tmp_path_factory.mktemp("engine-pair"), replicas=2, restart_backoff_initial=0.5)
    try:
        yield gw.wait_ready()
    finally:
        gw.close()


PINNED_TOKENS = 200  # marks the pinned request in the engine's /slots (the traffic asks for 6)
COUNTING = [{"role": "user", "content": "Count from 1 to 100, one number per line."}]
# SmolLM2's end tokens (<|im_end|> 2, <|endoftext|> 0) banned, so a long request runs to max_tokens:
# it once wrote 19 tokens and ended before the kill that was to cut it.
NO_END = {"2": -100, "0": -100}


def pinned_slot_busy(gateway: Gateway, index: int, n_predict: int = PINNED_TOKENS) -> bool:
    """Replica `index`'s engine is generating the request that asked for `n_predict` tokens (its own
    /slots says so), so a kill now surely cuts it."""
    port = gateway.replicas()[index]["port"]
    try:
        slots = httpx.get(f"http://127.0.0.1:{port}/slots", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return False
    return any(
        isinstance(s, dict) and s.get("is_processing") and (s.get("params") or {}).get("n_predict") == n_predict
        for s in slots
    )


def test_with_two_replicas_requests_fall_back_to_the_other(pair: Gateway) -> None:
    # One long request pinned first to replica 0 (routing preference `order`), killed once replica 0's
    # engine reports it generating (a fixed sleep raced a fast answer: it once finished first);
    # short requests keep both replicas busy meanwhile.
    pinned: dict[str, object] = {}

    def long_request() -> None:
        with pair.client() as client:
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL, messages=COUNTING, max_tokens=PINNED_TOKENS, logit_bias=NO_END,
                extra_body={"provider": {"order": ["local-0"]}},
            )
            pinned.update(headers=raw.headers, completion=raw.parse())

    with Traffic(pair) as traffic:
        assert wait_until(lambda: len(traffic.successes()) >= 4, 30), pair.log()
        pinned_thread = threading.Thread(target=long_request)
        pinned_thread.start()
        assert wait_until(lambda: pinned_slot_busy(pair, 0), 30, interval=0.01), pair.log()
        old_pid, killed_at = kill_replica(pair, 0)
        pinned_thread.join(60)

        def back() -> bool:
            replica = pair.replicas()[0]
            return replica["state"] == "ready" and replica["restarts"] == 1

        assert wait_until(back, RESTART_BOUND_S, interval=0.1), pair.log()
        restarted = time.monotonic()
        assert wait_until(lambda: len(traffic.successes(since=restarted)) >= 2, 30)

    headers = pinned["headers"]
    assert headers["x-gateway-endpoint"] == "local-1", headers  # type: ignore[index]
    assert int(headers["x-gateway-attempts"]) >= 2  # type: ignore[index]
    failures = [o for o in traffic.outcomes if not o.endpoint]
    assert failures == []
    assert any(o.endpoint == "local-1" for o in traffic.outcomes if o.started >= killed_at)
    assert not alive(old_pid)
    assert pair.replicas()[0]["pid"] != old_pid


def test_with_two_replicas_a_cut_stream_errors_and_new_streams_go_to_the_other(pair: Gateway) -> None:
    """A stream on the replica that dies ends with the error event (never a clean end); streams sent
    after the kill are served by the other replica to a clean end, without waiting for the restart."""
    assert wait_until(lambda: all(r["state"] == "ready" for r in pair.replicas()), RESTART_BOUND_S + 5), pair.log()
    with pair.client() as client:
        # `order` prefers local-0, but routing may still pick local-1 (local-0 was just killed by the
        # test before): the victim is the replica the stream is on, as its header says.
        raw_cut = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=COUNTING, max_tokens=400, logit_bias=NO_END, stream=True,
            extra_body={"provider": {"order": ["local-0"]}},
        )
        victim = int(raw_cut.headers["x-gateway-endpoint"].removeprefix("local-"))
        survivor = f"local-{1 - victim}"
        restarts = pair.replicas()[victim]["restarts"]
        chunks = iter(raw_cut.parse())
        assert next(chunks).choices
        assert pinned_slot_busy(pair, victim, n_predict=400), pair.log()  # still generating
        old_pid, _ = kill_replica(pair, victim)
        with pytest.raises(openai.APIError) as caught:
            for _ in chunks:
                pass
        assert caught.value.code == "upstream_stream_error"
        after: list[tuple[str, str | None]] = []
        for i in range(3):
            try:
                raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=SHORT, max_tokens=8,
                                                                       stream=True)
            except openai.APIError as exc:  # seen once under a heavy foreign load: keep what explains it
                pytest.fail(f"request {i} after the kill: {exc}; replicas {pair.replicas()}\n{pair.log()}")
            finish = [c.choices[0].finish_reason for c in raw.parse() if c.choices and c.choices[0].finish_reason]
            after.append((raw.headers["x-gateway-endpoint"], finish[-1] if finish else None))
            if i == 0:
                dead_then = pair.replicas()[victim]

    def back() -> bool:
        replica = pair.replicas()[victim]
        return replica["state"] == "ready" and replica["restarts"] == restarts + 1

    assert wait_until(back, RESTART_BOUND_S, interval=0.1), pair.log()
    assert all(finish in ("stop", "length") for _, finish in after), after
    # The first was served by the survivor while the dead replica had not come back yet.
    assert after[0][0] == survivor, after
    assert dead_then["state"] != "ready" or dead_then["restarts"] == restarts, dead_then
    assert not alive(old_pid)


def test_sigkill_of_the_gateway_takes_its_engines_along(pair: Gateway) -> None:
    # Whatever the tests before left restarting (one that failed mid-way) is back first.
    assert wait_until(lambda: all(r["state"] == "ready" for r in pair.replicas()), RESTART_BOUND_S + 5), pair.log()
    replicas = pair.replicas()
    pids, ports = [r["pid"] for r in replicas], [r["port"] for r in replicas]
    assert all(alive(pid) for pid in pids)

    pair.signal(signal.SIGKILL)
    pair.proc.wait(5)

    assert wait_until(lambda: not any(alive(pid) for pid in pids), 5), [p for p in pids if alive(p)]
    assert [engine_processes(port) for port in ports] == [[], []]


# -- one replica: 503 while it restarts ----------------------------------------------------


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = Gateway(tmp_path_factory.mktemp("engine-single"), restart_backoff_initial=0.5)
    try:
        yield gw.wait_ready()
    finally:
        gw.close()


def test_a_stream_cut_by_a_dead_engine_ends_in_an_error(single: Gateway) -> None:
    with single.client() as client:
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Write a very long story."}], max_tokens=400, stream=True
        )
        chunks = iter(stream)
        first = next(chunks)
        assert first.choices
        kill_replica(single, 0)
        with pytest.raises(openai.APIError) as caught:
            for _ in chunks:
                pass
    # A stable message and code with the request id; which endpoint broke is in the log and the record.
    assert caught.value.code == "upstream_stream_error"
    assert "stream broke off" in caught.value.message and "req_" in caught.value.message
    assert wait_until(lambda: single.replicas()[0]["state"] == "ready", RESTART_BOUND_S, interval=0.1), single.log()


def test_with_one_replica_requests_get_503_while_it_restarts(single: Gateway) -> None:
    with Traffic(single) as traffic:
        assert wait_until(lambda: len(traffic.successes()) >= 2, 30), single.log()
        restarts_before = single.replicas()[0]["restarts"]
        _, killed_at = kill_replica(single, 0)
        assert wait_until(lambda: traffic.successes(since=killed_at + 0.01), RESTART_BOUND_S + 5)
    recovered = min(o.ended for o in traffic.successes(since=killed_at + 0.01)) - killed_at

    failures = [o for o in traffic.outcomes if not o.endpoint]
    assert failures, "no request saw the restart"
    for failure in failures:
        assert failure.status == 503, failure
        assert failure.error is not None and failure.error["code"] == "no_endpoint_available"
        assert failure.error["type"] == "api_error"
        assert "starting or restarting" in str(failure.error["message"]) and MODEL in str(failure.error["message"])
    assert recovered < RESTART_BOUND_S, f"served again {recovered:.2f}s after the kill"
    print(f"\n1 replica: served again {recovered:.2f}s after kill -9; {len(failures)} requests got 503 meanwhile")
    assert single.replicas()[0]["restarts"] == restarts_before + 1


def test_sigterm_stops_the_gateway_and_its_engines(single: Gateway) -> None:
    (replica,) = single.replicas()
    assert alive(replica["pid"])
    started = time.monotonic()

    single.signal(signal.SIGTERM)
    code = single.proc.wait(EXIT_BOUND_S)

    assert code == 0, single.log()
    assert time.monotonic() - started < EXIT_BOUND_S
    assert not alive(replica["pid"])
    assert engine_processes(replica["port"]) == []
    assert "Traceback" not in single.log()

