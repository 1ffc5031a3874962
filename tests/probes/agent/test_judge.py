"""The judge's side of the link, without a sandbox: what the solution's driver answers is hostile,
so it is parsed with limits into plain values, and the judge's own objects never travel."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from probes.agent import judge
from probes.agent.judge import GRACE_SECONDS, Link, Remote, SolutionError, SolutionGone, decode, encode


@pytest.fixture
def pair() -> Iterator[tuple[Link, socket.socket]]:
    ours, theirs = socket.socketpair()
    link = Link(ours)
    link.deadline = time.monotonic() + 5.0
    yield link, theirs
    ours.close()
    theirs.close()


def _flood(theirs: socket.socket, payload: bytes) -> None:
    try:
        theirs.sendall(payload)
    except OSError:
        pass  # the judge stopped reading


def test_plain_values_and_tags_decode(pair: tuple[Link, socket.socket]) -> None:
    link, _ = pair
    value = {"d": [["a", {"t": [1, 2.5, None, True]}], [{"t": [1, 2]}, {"s": [1, 2]}], ["b", {"b": "ff00"}]]}
    assert decode(value, link) == {"a": (1, 2.5, None, True), (1, 2): {1, 2}, "b": b"\xff\x00"}
    proxy = decode({"h": 3, "c": "Game", "m": 1}, link)
    assert type(proxy) is Remote and repr(proxy) == "<Game object of the solution>"


@pytest.mark.parametrize("value", [
    {"pickle": "gASVAAAAAAAAAAA="},  # an unknown tag
    {"t": [1], "d": []},  # two tags
    {"h": "3"},  # a handle that is not a number
    {"h": 3, "code": "x"},  # a handle with more in it
    {"d": [[[1], 2]]},  # an unhashable key
    {"d": [[1, 2, 3]]},  # not a pair
    {"b": "zz"},  # not hex
    {},
])
def test_malformed_values_are_refused(pair: tuple[Link, socket.socket], value: object) -> None:
    link, _ = pair
    with pytest.raises((ValueError, TypeError)):
        decode(value, link)


def test_nesting_is_capped(pair: tuple[Link, socket.socket]) -> None:
    link, _ = pair
    ok: object = 1
    for _ in range(judge.MAX_DEPTH):  # MAX_DEPTH lists, one inside the other
        ok = [ok]
    decode(ok, link)
    with pytest.raises(ValueError, match="deep"):
        decode([ok], link)


def test_a_proxy_never_asks_the_solution_to_compare_hash_or_print(pair: tuple[Link, socket.socket]) -> None:
    link, theirs = pair
    proxy = decode({"h": 1, "c": "Anything"}, link)
    assert (proxy == 5, proxy != 5, proxy == proxy, hash(proxy) == hash(proxy)) == (False, True, True, True)
    assert "Anything" in str(proxy) and "Anything" in f"{proxy!r}"
    theirs.setblocking(False)
    with pytest.raises(BlockingIOError):
        theirs.recv(1)  # nothing was sent


def test_the_judges_own_objects_never_travel() -> None:
    for value in (lambda: 0.0, object(), type, [1, print], {"k": (1, open)}):
        with pytest.raises(TypeError, match="cannot be passed"):
            encode(value)


def test_exceptions_become_built_in_types_or_solution_error() -> None:
    exc = judge.solution_exception({"types": ["ValueError", "Exception", "BaseException"], "name": "Bad", "message": "line 4"})
    assert type(exc) is ValueError and str(exc) == "line 4"
    # Never one that would stop the judge, whatever names the solution gives.
    for types in (["SystemExit", "BaseException"], ["KeyboardInterrupt"], ["GeneratorExit"], [1, None], "ValueError"):
        exc = judge.solution_exception({"types": types, "name": "X", "message": "m"})
        assert type(exc) is SolutionError, types
    assert len(str(judge.solution_exception({"types": [], "name": "N" * 10_000, "message": "m" * 10_000}))) < 600


def _request(link: Link) -> BaseException | object:
    try:
        return link.request("get", obj=0, name="x")
    except BaseException as exc:  # noqa: BLE001 - the outcome under test
        return exc


def test_an_answer_longer_than_the_cap_ends_the_link(pair: tuple[Link, socket.socket]) -> None:
    link, theirs = pair
    flood = threading.Thread(target=_flood, args=(theirs, b"[" + b"1," * (judge.MAX_LINE // 2 + 10)), daemon=True)
    flood.start()  # no newline, past the cap; more than a socket buffer holds, so from a thread
    outcome = _request(link)
    assert isinstance(outcome, SolutionGone) and "longer than" in str(outcome) and link.dead is not None
    theirs.setblocking(False)
    theirs.recv(1 << 20)  # the first request
    with pytest.raises(SolutionGone):
        link.request("get", obj=0, name="y")
    with pytest.raises(BlockingIOError):
        theirs.recv(1)  # the link is given up: nothing more is sent


def test_an_answer_out_of_turn_ends_the_link(pair: tuple[Link, socket.socket]) -> None:
    link, theirs = pair
    theirs.sendall(json.dumps({"id": 99, "ok": 1}).encode() + b"\n")
    assert isinstance(_request(link), SolutionGone) and link.dead is not None


def test_a_raised_answer_is_raised_and_the_link_stays(pair: tuple[Link, socket.socket]) -> None:
    link, theirs = pair
    theirs.sendall(json.dumps({"id": 1, "raised": {"types": ["KeyError", "LookupError"], "message": "k"}}).encode()
                   + b"\n" + json.dumps({"id": 2, "ok": {"t": [1, 2]}}).encode() + b"\n")
    with pytest.raises(KeyError):
        link.request("get", obj=0, name="x")
    assert link.request("get", obj=0, name="y") == (1, 2) and link.dead is None


def test_no_answer_times_out_after_the_budget_and_grace(pair: tuple[Link, socket.socket]) -> None:
    link, _ = pair
    link.deadline = time.monotonic() + 0.2
    started = time.monotonic()
    outcome = _request(link)
    waited = time.monotonic() - started
    assert isinstance(outcome, judge.CheckTimeout) and link.dead is not None
    assert 0.2 + GRACE_SECONDS - 0.05 <= waited < 0.2 + GRACE_SECONDS + 1.0, waited
    with pytest.raises(SolutionGone):
        link.request("get", obj=0, name="x")


def test_a_solution_that_stops_reading_cannot_stall_a_request(pair: tuple[Link, socket.socket]) -> None:
    link, _ = pair  # the far end never reads: a request bigger than the socket buffers cannot be sent
    link.deadline = time.monotonic() + 0.2
    started = time.monotonic()
    with pytest.raises((SolutionGone, judge.CheckTimeout)):
        link.request("call", obj=0, args=["x" * (8 << 20)], kwargs={})
    assert time.monotonic() - started < 0.2 + GRACE_SECONDS + 1.0 and link.dead is not None
