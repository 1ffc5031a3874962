"""The incremental SSE decoder: any chunking gives the same events."""

from __future__ import annotations

import random

import pytest

from providers.sse import SSEDecoder

STREAM = (
    b": keep-alive comment\r\n"
    b"\r\n"
    b'data: {"a": 1}\r\n'
    b"\r\n"
    b"event: error\n"
    b"data: line one\n"
    b"data: line two\n"
    b"\n"
    b"data:no-space\r"
    b"\r"
    b"id: 7\n"
    b"retry: 100\n"
    b"data\n"
    b"\n"
    b"data: [DONE]\r\n"
    b"\r\n"
)
EVENTS = [(None, b'{"a": 1}'), ("error", b"line one\nline two"), (None, b"no-space"), (None, b""), (None, b"[DONE]")]


def decode(chunks: list[bytes]) -> list[tuple[str | None, bytes]]:
    decoder = SSEDecoder()
    events = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events


def test_whole() -> None:
    assert decode([STREAM]) == EVENTS


def test_byte_by_byte() -> None:
    assert decode([STREAM[i : i + 1] for i in range(len(STREAM))]) == EVENTS


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_every_split_point(cut: int) -> None:
    assert decode([STREAM[:cut], STREAM[cut:]]) == EVENTS


def test_random_chunkings() -> None:
    rng = random.Random(5)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(STREAM)), rng.randint(1, 12)))
        chunks = [STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(STREAM)], strict=True)]
        assert decode(chunks) == EVENTS


@pytest.mark.parametrize(
    "chunks",
    [
        [b"data: x\r", b"", b"\n\r", b"", b"\n"],
        [b"data: x\r", b"\r"],
        [b"data: x\r\n", b"\r\n"],
        [b"data: x", b"\n", b"\n"],
    ],
)
def test_line_end_split_across_chunks(chunks: list[bytes]) -> None:
    assert decode(chunks) == [(None, b"x")]


def test_cr_lf_split_is_one_line_end_not_two() -> None:
    # "\r" then "\n" is a single line end: two of them end the event, one does not.
    assert decode([b"data: a\r", b"\ndata: b\r", b"\n\r\n"]) == [(None, b"a\nb")]


def test_unterminated_event_is_not_emitted() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: partial\n") == []
    assert decoder.flush() == []
    assert decoder.feed(b"\n") == []  # the half event was dropped by flush


def test_comments_and_unknown_fields_only() -> None:
    assert decode([b": ping\n\n: ping\n\nfoo: bar\n\n"]) == []


def test_event_name_resets_after_dispatch() -> None:
    assert decode([b"event: a\ndata: 1\n\ndata: 2\n\n"]) == [("a", b"1"), (None, b"2")]


def test_only_one_leading_space_is_stripped() -> None:
    assert decode([b"data:  two spaces\n\n"]) == [(None, b" two spaces")]


def test_colon_in_value() -> None:
    assert decode([b'data: {"url": "http://x"}\n\n']) == [(None, b'{"url": "http://x"}')]


def test_event_ended_by_a_trailing_cr_is_emitted_at_once() -> None:
    # A lone "\r" at the end of a chunk already ends the line; the event must not wait for more bytes
    # (it may be the stream's last, e.g. [DONE]).
    decoder = SSEDecoder()
    assert decoder.feed(b"data: [DONE]\r\r") == [(None, b"[DONE]")]
    assert decoder.feed(b"\ndata: next\n\n") == [(None, b"next")]  # that "\n" closed the "\r", nothing more
