"""A small incremental Server-Sent Events decoder (no I/O).

Feed it raw byte chunks as they arrive; it yields complete events as ``(event, data)``.
Handles ``\\n``, ``\\r\\n`` and ``\\r`` line ends, multi-line data, comments and chunk
boundaries anywhere, including inside a line end.
"""

from __future__ import annotations


class SSEDecoder:
    __slots__ = ("_buffer", "_event", "_data")

    def __init__(self) -> None:
        self._buffer = b""
        self._event: str | None = None
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[tuple[str | None, bytes]]:
        if b"\r" in chunk or self._buffer.endswith(b"\r"):
            chunk = chunk.replace(b"\r\n", b"\n")
            buffer = (self._buffer + chunk).replace(b"\r\n", b"\n")
            # A lone trailing \r may be the first half of \r\n: keep it for the next chunk.
            if buffer.endswith(b"\r"):
                self._buffer = b"\r"
                buffer = buffer[:-1]
            else:
                self._buffer = b""
            buffer = buffer.replace(b"\r", b"\n")
        else:
            buffer = self._buffer + chunk
            self._buffer = b""
        events: list[tuple[str | None, bytes]] = []
        start = 0
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            self._line(buffer[start:end], events)
            start = end + 1
        self._buffer = buffer[start:] + self._buffer
        return events

    def flush(self) -> list[tuple[str | None, bytes]]:
        """End of stream: an unterminated last event is dropped, as the SSE spec says."""
        self._buffer = b""
        self._data = []
        self._event = None
        return []

    def _line(self, line: bytes, events: list[tuple[str | None, bytes]]) -> None:
        if not line:
            if self._data:
                events.append((self._event, b"\n".join(self._data)))
            self._data = []
            self._event = None
            return
        if line[0] == 0x3A:  # ":" comment / keep-alive
            return
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        # "id" and "retry" are not used by LLM APIs.
