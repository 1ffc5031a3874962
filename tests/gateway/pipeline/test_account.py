"""Accounting: cost math (cached tokens at their own price), per-endpoint totals, the record
handed to the request's observers."""

from __future__ import annotations

import orjson
import pytest

from gateway.pipeline.account import Accountant, cost_usd
from gateway.pipeline.context import RequestContext
from gateway.pipeline.observe import RecordObserver
from kernel.deployment import Price
from kernel.records import RequestRecord
from kernel.values import MAX_USAGE_TOKENS, Usage

PRICE = Price(input=2.0, cached_input=0.5, output=8.0)  # USD per 1M tokens


def test_cost_without_cache() -> None:
    assert cost_usd(Usage(prompt_tokens=1_000_000, completion_tokens=500_000), PRICE) == pytest.approx(2.0 + 4.0)


def test_cost_with_cached_tokens() -> None:
    usage = Usage(prompt_tokens=1_000, completion_tokens=200, cached_tokens=600)
    expected = (400 * 2.0 + 600 * 0.5 + 200 * 8.0) / 1_000_000
    assert cost_usd(usage, PRICE) == pytest.approx(expected)


def test_cached_tokens_default_to_the_input_price() -> None:
    price = Price(input=2.0, output=8.0)
    cached = cost_usd(Usage(prompt_tokens=1_000, completion_tokens=0, cached_tokens=1_000), price)
    assert cached == pytest.approx(cost_usd(Usage(prompt_tokens=1_000), price))


def test_cached_tokens_are_capped_at_the_prompt() -> None:
    usage = Usage(prompt_tokens=100, completion_tokens=0, cached_tokens=500)  # a provider's bad report
    assert cost_usd(usage, PRICE) == pytest.approx(100 * 0.5 / 1_000_000)


def test_no_usage_costs_nothing() -> None:
    assert cost_usd(None, PRICE) == 0.0


class Sink(RecordObserver):
    def __init__(self) -> None:
        self.records: list[RequestRecord] = []
        self.contexts: list[RequestContext] = []

    def finished(self, ctx: RequestContext, record: RequestRecord | None = None) -> None:
        assert record is not None
        self.contexts.append(ctx)
        self.records.append(record)


def ctx(endpoint_id: str | None, usage: Usage | None, status: int = 200, started: float = 10.0) -> RequestContext:
    c = RequestContext(
        request_id="req_1", op="chat", started=started, key_name="team", model="m", stream=True, attempts=2
    )
    c.endpoint_id, c.usage, c.status, c.ttft, c.waited = endpoint_id, usage, status, 0.25, 1.0
    return c


def test_record_and_totals() -> None:
    sink = Sink()
    now = [11.5]
    accountant = Accountant({"a/m": PRICE}.get, lambda: now[0], sink)

    record = accountant.record(ctx("a/m", Usage(prompt_tokens=1_000, completion_tokens=200, cached_tokens=600)))
    accountant.record(ctx("a/m", None, status=502))

    assert sink.records[0] is record
    assert (record.request_id, record.key_name, record.model, record.endpoint_id, record.op) == (
        "req_1",
        "team",
        "m",
        "a/m",
        "chat",
    )
    assert (record.stream, record.attempts, record.status, record.ttft_s) == (True, 2, 200, 0.25)
    assert record.api == "chat"  # a chat client's own API
    assert (record.prompt_tokens, record.cached_tokens, record.completion_tokens) == (1_000, 600, 200)
    assert record.cost_usd == pytest.approx((400 * 2.0 + 600 * 0.5 + 200 * 8.0) / 1_000_000)
    assert record.latency_s == pytest.approx(1.5)
    assert record.overhead_ms == pytest.approx(500.0)  # 1.5 s minus 1.0 s waiting on the upstream
    totals = accountant.totals["a/m"]
    assert (totals.requests, totals.errors, totals.prompt_tokens, totals.cached_tokens, totals.completion_tokens) == (
        2,
        1,
        1_000,
        600,
        200,
    )
    assert totals.cost_usd == pytest.approx(record.cost_usd)


def test_a_translated_request_records_the_api_the_client_spoke() -> None:
    accountant = Accountant({"a/m": PRICE}.get, lambda: 11.5)
    for api in ("responses", "messages"):
        c = ctx("a/m", None)
        c.api = api
        record = accountant.record(c)
        assert (record.op, record.api) == ("chat", api)


def test_request_that_reached_no_endpoint() -> None:
    accountant = Accountant({}.get, lambda: 10.0)
    record = accountant.record(ctx(None, None, status=400))
    assert record.cost_usd == 0.0 and record.endpoint_id is None
    assert accountant.totals == {}


def test_unpriced_endpoint_costs_nothing() -> None:
    accountant = Accountant({}.get, lambda: 10.0)
    record = accountant.record(ctx("x/m", Usage(prompt_tokens=10, completion_tokens=10)))
    assert record.cost_usd == 0.0
    assert accountant.totals["x/m"].prompt_tokens == 10


def test_usage_from_openai() -> None:
    assert Usage.from_openai(None) is None
    assert Usage.from_openai({}) is None
    usage = Usage.from_openai(
        {"prompt_tokens": 12, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 8}}
    )
    assert usage == Usage(prompt_tokens=12, completion_tokens=3, cached_tokens=8)
    assert Usage.from_openai({"prompt_tokens": 5, "completion_tokens": None, "prompt_tokens_details": None}) == Usage(
        5, 0, 0
    )


def test_usage_from_openai_clamps_and_validates_what_the_upstream_claims() -> None:
    huge = Usage.from_openai({"prompt_tokens": 10**17, "completion_tokens": 1e300, "prompt_tokens_details": {"cached_tokens": 5}})
    assert huge == Usage(prompt_tokens=MAX_USAGE_TOKENS, completion_tokens=MAX_USAGE_TOKENS, cached_tokens=5)
    garbage = Usage.from_openai(
        {"prompt_tokens": "12", "completion_tokens": float("inf"), "prompt_tokens_details": {"cached_tokens": [1]}}
    )
    assert garbage is None  # nothing counted: estimated, never free
    assert Usage.from_openai({"prompt_tokens": -5, "completion_tokens": True, "total_tokens": 1}) == Usage(1, 0, 0)
    assert Usage.from_openai({"prompt_tokens": 7.0, "prompt_tokens_details": "x"}) == Usage(7, 0, 0)
    assert Usage.from_openai(["not", "a", "mapping"]) is None  # type: ignore[arg-type]
    assert Usage.from_openai("usage") is None  # type: ignore[arg-type]


def test_an_answer_without_usage_is_recorded_at_an_estimate_and_flagged() -> None:
    """Committed (answered) without usage: the prompt estimate plus the output the client got,
    4 characters a token or a token a piece, whichever is more; never answered: nothing."""
    from types import SimpleNamespace

    from gateway.pipeline.estimate import count_payloads

    price = Price(input=2.0, output=8.0)
    accountant = Accountant(lambda _: price, lambda: 1.0)
    ctx = RequestContext(request_id="r", op="chat", started=0.0, body={"model": "m", "n": 2}, model="m", endpoint_id="p/m")
    ctx.route = SimpleNamespace(features=SimpleNamespace(prompt_tokens=50, max_output_tokens=None))  # type: ignore[assignment]
    ctx.committed = True
    whole = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x" * 40,
                                                  "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}},
                         {"index": 1, "message": {"content": "y" * 38}}]}
    count_payloads(ctx, [orjson.dumps(whole), b"not json"])
    record = accountant.record(ctx)
    assert record.usage_estimated and ctx.usage_estimated
    assert (record.prompt_tokens, record.completion_tokens) == (50, 21)  # (40 + 3 + 38) / 4, rounded up
    assert record.cost_usd == pytest.approx((50 * 2.0 + 21 * 8.0) / 1_000_000)
    ctx.route = SimpleNamespace(features=SimpleNamespace(prompt_tokens=50, max_output_tokens=4))  # type: ignore[assignment]
    ctx.usage, ctx.usage_estimated = None, False
    assert accountant.record(ctx).completion_tokens == 8  # capped: max_tokens x n
    never = RequestContext(request_id="s", op="chat", started=0.0, model="m", endpoint_id="p/m")
    record = accountant.record(never)  # failed before any endpoint answered
    assert not record.usage_estimated and record.cost_usd == 0.0 and never.usage is None


def test_a_usage_that_did_not_count_the_prompt_gets_the_prompts_estimate_and_keeps_its_output() -> None:
    """A Messages stream whose message_start never came counts its output only: billing its prompt
    as 0 tokens would make the input free; the route's estimate stands in, flagged."""
    from types import SimpleNamespace

    price = Price(input=2.0, output=8.0)
    accountant = Accountant(lambda _: price, lambda: 1.0)
    ctx = RequestContext(request_id="r", op="chat", started=0.0, body={"model": "m"}, model="m", endpoint_id="p/m")
    ctx.route = SimpleNamespace(features=SimpleNamespace(prompt_tokens=50, max_output_tokens=None))  # type: ignore[assignment]
    ctx.committed = True
    ctx.usage = Usage(prompt_tokens=0, completion_tokens=12, prompt_reported=False)
    ctx.prompt_usage = Usage(prompt_tokens=0, prompt_reported=False)  # an opening without a count: not the prompt's
    record = accountant.record(ctx)
    assert (record.prompt_tokens, record.completion_tokens) == (50, 12)  # the output's own count, not re-estimated
    assert record.usage_estimated and ctx.usage_estimated
    assert record.cost_usd == pytest.approx((50 * 2.0 + 12 * 8.0) / 1_000_000)
    counted = RequestContext(request_id="s", op="chat", started=0.0, body={"model": "m"}, model="m", endpoint_id="p/m")
    counted.route, counted.committed = ctx.route, True
    counted.usage = Usage(prompt_tokens=0, completion_tokens=12)  # a prompt counted as 0 is the upstream's claim
    assert not accountant.record(counted).usage_estimated and counted.usage.prompt_tokens == 0


def test_a_usage_without_an_output_count_bills_the_output_the_client_got() -> None:
    """`completion_tokens` left out is no count: the output is the estimate of what reached the
    client (flagged), the prompt the upstream's count. A count of 0 is one (an empty answer), and
    an embedding has no output to count."""
    from types import SimpleNamespace

    price = Price(input=2.0, output=8.0)
    accountant = Accountant(lambda _: price, lambda: 1.0)

    def committed(op: str = "chat") -> RequestContext:
        ctx = RequestContext(request_id="r", op=op, started=0.0, body={"model": "m"}, model="m", endpoint_id="p/m")
        ctx.route = SimpleNamespace(features=SimpleNamespace(prompt_tokens=50, max_output_tokens=None))  # type: ignore[assignment]
        ctx.committed = True
        return ctx

    ctx = committed()
    ctx.usage = Usage.from_openai({"prompt_tokens": 30, "total_tokens": 30})
    ctx.output_chars, ctx.output_pieces = 80, 10
    record = accountant.record(ctx)
    assert (record.prompt_tokens, record.completion_tokens, record.usage_estimated) == (30, 20, True)
    assert record.cost_usd == pytest.approx((30 * 2.0 + 20 * 8.0) / 1_000_000)
    fanned = committed()  # parts that counted 25 tokens of output, one whose 80 characters were not counted
    fanned.usage = Usage(prompt_tokens=60, completion_tokens=25, completion_reported=False)
    fanned.output_chars, fanned.output_pieces = 80, 10
    assert accountant.record(fanned).completion_tokens == 25 + 20
    assert fanned.usage_counted is not None and fanned.usage_counted.completion_tokens == 25
    empty = committed()
    empty.usage = Usage.from_openai({"prompt_tokens": 30, "completion_tokens": 0})
    empty.output_chars, empty.output_pieces = 80, 10
    record = accountant.record(empty)
    assert (record.completion_tokens, record.usage_estimated) == (0, False)  # the upstream's count stands
    nothing_sent = committed()
    nothing_sent.usage = Usage.from_openai({"prompt_tokens": 30})
    record = accountant.record(nothing_sent)
    assert (record.prompt_tokens, record.completion_tokens, record.usage_estimated) == (30, 0, False)
    cached = committed()  # the upstream's cache count stays its own
    cached.usage = Usage.from_openai({"prompt_tokens": 30, "prompt_tokens_details": {"cached_tokens": 20}})
    cached.output_chars, cached.output_pieces = 80, 10
    accountant.record(cached)
    assert cached.usage.cache_reported and (cached.usage.cached_tokens, cached.usage.completion_tokens) == (20, 20)
    assert cached.usage_counted is not None and cached.usage_counted.completion_tokens == 0
    embedding = committed("embeddings")
    embedding.usage = Usage.from_openai({"prompt_tokens": 8, "total_tokens": 8})
    assert not accountant.record(embedding).usage_estimated


def test_a_whole_messages_answer_without_usage_is_counted_from_its_content_blocks() -> None:
    from gateway.pipeline.estimate import count_payloads

    ctx = RequestContext(request_id="r", op="chat", started=0.0, model="m")
    message = {"type": "message", "content": [{"type": "thinking", "thinking": "t" * 8, "signature": "s"},
                                              {"type": "redacted_thinking", "data": "r" * 6},
                                              {"type": "text", "text": "x" * 40},
                                              {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                                              {"type": "server_tool_use", "id": "t2", "name": "web", "input": {"q": "z"}}]}
    count_payloads(ctx, [orjson.dumps(message)])
    assert (ctx.output_chars, ctx.output_pieces) == (8 + 6 + 40 + 1 + len('{"a":1}') + 3 + len('{"q":"z"}'), 5)


def test_a_whole_response_passed_through_is_counted_from_its_output_items() -> None:
    from gateway.pipeline.estimate import count_payloads

    ctx = RequestContext(request_id="r", op="responses", started=0.0, model="m")
    response = {"object": "response", "output": [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s" * 12}]},
        {"type": "message", "content": [{"type": "output_text", "text": "x" * 40, "annotations": []}]},
        {"type": "function_call", "name": "f", "arguments": '{"a":1}', "call_id": "c"},
        "not an item",
    ]}
    count_payloads(ctx, [orjson.dumps(response)])
    assert (ctx.output_chars, ctx.output_pieces) == (12 + 40 + 1 + len('{"a":1}'), 3)


def test_usage_from_openai_says_whether_the_prompt_was_counted() -> None:
    def flags(usage: dict[str, object]) -> tuple[int, int, bool] | None:
        got = Usage.from_openai(usage)
        return None if got is None else (got.prompt_tokens, got.completion_tokens, got.prompt_reported)

    assert flags({"prompt_tokens": 12, "completion_tokens": 3}) == (12, 3, True)
    assert flags({"completion_tokens": 7}) == (0, 7, False)  # output only: the prompt is estimated
    assert flags({"prompt_tokens": None, "completion_tokens": 7}) == (0, 7, False)
    assert flags({"prompt_tokens": 0, "completion_tokens": 7}) == (0, 7, False)  # no prompt is 0 tokens
    assert flags({"prompt_tokens": -3, "completion_tokens": 7}) == (0, 7, False)
    assert flags({"prompt_tokens": True, "completion_tokens": 7}) == (0, 7, False)
    assert flags({"total_tokens": 30}) == (30, 0, True)  # an embeddings upstream that counts a total only
    assert flags({"total_tokens": 30, "completion_tokens": 7}) == (0, 7, False)  # not split: the prompt estimated
    assert flags({"prompt_tokens": 8, "total_tokens": 8}) == (8, 0, True)  # embeddings
    assert flags({"prompt_tokens": 0, "total_tokens": 12}) == (12, 0, True)  # a 0 prompt is no count: the total is
    assert flags({"total_tokens": "30"}) is None and flags({"service_tier": "x"}) is None
    assert flags({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}) is None  # zeros count nothing
    reported = Usage.from_openai({"prompt_tokens": 12, "completion_tokens": 0})
    assert reported is not None and reported.completion_reported  # 0 counted: an empty answer
    for left_out in ({"prompt_tokens": 12}, {"prompt_tokens": 12, "completion_tokens": None},
                     {"prompt_tokens": 12, "completion_tokens": "3"}, {"prompt_tokens": 12, "completion_tokens": -1}):
        got = Usage.from_openai(left_out)
        assert got is not None and not got.completion_reported and got.completion_tokens == 0, left_out
