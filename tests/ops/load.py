"""Open-loop load through the official openai SDK: requests start on a fixed schedule whatever the
server does (a stalled server cannot slow the load down), each with its own x-request-id, and each
ends as one `Outcome` (answered in full, or the error the client saw, by cause)."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import openai


@dataclass
class Outcome:
    request_id: str
    stream: bool
    start: float
    end: float = 0.0
    cause: str | None = None  # None: answered in full (a stream: a finish_reason and the SDK saw its end)
    text: str = ""
    detail: str = ""  # the error's message, cut short
    due: float = 0.0  # when the schedule wanted it started (start - due: the load generator's lag)

    @property
    def ok(self) -> bool:
        return self.cause is None

    def in_flight_at(self, t: float) -> bool:
        return self.start <= t < self.end


def cause_of(exc: BaseException) -> str:
    """A short name for what the client saw: `http 502`, `connect`, `timeout`, `cut` (a body that
    ended early: the stream or the JSON was cut), `error event` (a stream's error event), or the
    exception's type."""
    if isinstance(exc, openai.APIStatusError):
        return f"http {exc.status_code}"
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        inner = exc.__cause__
        return "cut" if isinstance(inner, httpx.RemoteProtocolError | httpx.ReadError) else "connect"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return "cut"
    if isinstance(exc, openai.APIError):  # an error event inside a 200 stream
        return "error event"
    return type(exc).__name__


@dataclass
class Load:
    """`rate` requests a second, `stream_share` of them streamed, for `model` at `base_url`."""

    base_url: str
    key: str
    model: str
    rate: float
    stream_share: float = 0.3
    timeout: float = 30.0
    prompt: str = "hello there"
    max_tokens: int | None = None  # sent when set (a local engine's answers are as long as this allows)
    outcomes: list[Outcome] = field(default_factory=list)

    def client(self) -> openai.AsyncOpenAI:
        http = httpx.AsyncClient(limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100))
        return openai.AsyncOpenAI(base_url=self.base_url + "/v1", api_key=self.key, max_retries=0,
                                  timeout=self.timeout, http_client=http)

    async def one(self, client: openai.AsyncOpenAI, stream: bool, prompt: str | None = None,
                  due: float | None = None) -> Outcome:
        out = Outcome(uuid.uuid4().hex, stream, time.monotonic())
        out.due = out.start if due is None else due
        self.outcomes.append(out)
        messages = [{"role": "user", "content": prompt or self.prompt}]
        headers = {"x-request-id": out.request_id}
        limit = openai.omit if self.max_tokens is None else self.max_tokens
        try:
            if stream:
                finished = None
                chunks = await client.chat.completions.create(model=self.model, messages=messages,  # type: ignore[arg-type]
                                                              stream=True, extra_headers=headers, max_tokens=limit)
                async for chunk in chunks:
                    for choice in chunk.choices:
                        out.text += choice.delta.content or ""
                        finished = choice.finish_reason or finished
                if finished is None:
                    out.cause = "no finish_reason"
            else:
                answer = await client.chat.completions.create(model=self.model, messages=messages,  # type: ignore[arg-type]
                                                              extra_headers=headers, max_tokens=limit)
                out.text = answer.choices[0].message.content or ""
        except Exception as exc:  # noqa: BLE001 - every client-visible failure is an outcome
            out.cause = cause_of(exc)
            out.detail = str(exc)[:300]
        except asyncio.CancelledError:  # still going when the run stopped waiting: not an answer
            out.cause = "unfinished"
            out.end = time.monotonic()
            raise
        out.end = time.monotonic()
        return out

    async def run(self, duration: float, stop: asyncio.Event | None = None,
                  on_second: Callable[[int], None] | None = None) -> list[Outcome]:
        """Starts requests on schedule for `duration` s (or until `stop`), then waits for them all."""
        client = self.client()
        tasks: set[asyncio.Task[Outcome]] = set()
        streams = itertools.cycle(_spread(self.stream_share))
        start = time.monotonic()
        try:
            for i in itertools.count():
                due = start + i / self.rate
                if due - start >= duration or (stop is not None and stop.is_set()):
                    break
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                task = asyncio.create_task(self.one(client, next(streams), due=due))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.wait(tasks, timeout=self.timeout + 5)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)  # each records itself as unfinished
            await client.close()
        return self.outcomes


def _spread(share: float, slots: int = 20) -> list[bool]:
    """`share` of `slots` as True, spread evenly (a deterministic mix, not a random one)."""
    n = round(share * slots)
    return [int((i + 1) * n / slots) > int(i * n / slots) for i in range(slots)]


def causes(outcomes: list[Outcome]) -> Counter[str]:
    return Counter(o.cause for o in outcomes if o.cause is not None)
