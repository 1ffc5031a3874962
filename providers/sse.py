"""A small incremental Server-Sent Events decoder (no I/O).

Feed it raw byte chunks as they arrive; it yields complete events as ``(event, data)``.
Handles ``\\n``, ``\\r\\n`` and ``\\r`` line ends, multi-line data, comments and chunk
boundaries anywhere, including inside a line end.
"""

from __future__ import annotations


class SSEDecoder:
    __slots__ = ("_buffer", "_event", "_data", "_skip_lf")

    def __init__(self) -> None:
        self._buffer = b""
        self._event: str | None = None
        self._data: list[bytes] = []
        # The last chunk ended with "\r": a "\n" starting the next one completes that line end.
        self._skip_lf = False

    def feed(self, chunk: bytes) -> list[tuple[str | None, bytes]]:
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]
        if b"\r" in chunk:
            self._skip_lf = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buffer = self._buffer + chunk
        events: list[tuple[str | None, bytes]] = []
        start = 0
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            self._line(buffer[start:end], events)
            start = end + 1
        self._buffer = buffer[start:]
        return events

    def flush(self) -> list[tuple[str | None, bytes]]:
        """End of stream: an unterminated last event is dropped, as the SSE spec says."""
        self._buffer = b""
        self._skip_lf = False
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
