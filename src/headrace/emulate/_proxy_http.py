"""Just enough HTTP/1.1 for the proxy: message heads, body framing, and its own answers.

The proxy relays bytes as they came, so a :class:`Message` keeps its head raw
and reads only how its body is framed (``Content-Length``, chunked, or to the
end of the connection); :func:`read_body` returns the body with its chunk
markers kept. A head past :data:`MAX_HEAD` is :class:`HeadTooLarge`. What the
proxy says itself (a 4xx for a bad client, a 502 or 504 for a bad upstream, an
injected fault) goes out through :func:`answer` and closes the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

__all__ = [
    "MAX_HEAD",
    "HeadTooLarge",
    "Message",
    "answer",
    "answer_error",
    "discard_head",
    "interim",
    "problem",
    "read_body",
    "read_head",
    "short_chunked",
    "with_length",
]

MAX_HEAD = 64 * 1024


class Message:
    """An HTTP/1.1 message head plus how its body is framed; a ``response`` head's
    ``status`` too. A head that cannot be framed is a ValueError saying why."""

    __slots__ = ("chunked", "close", "expect_continue", "head", "length", "start_line", "status")

    def __init__(self, head: bytes, *, response: bool = False) -> None:
        self.head = head
        lines = head.decode("latin-1").split("\r\n")
        self.start_line = lines[0]
        self.status = 0
        if response:
            # A status line with no status ("GARBAGE") was an IndexError, and a bare close.
            parts = self.start_line.split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/") or not _is_status(parts[1]):
                raise ValueError(
                    f"status line {self.start_line[:200]!r} is not 'HTTP/1.1 NNN Reason'"
                )
            self.status = int(parts[1])
        self.length: int | None = None
        self.chunked = False
        self.close = False
        self.expect_continue = False
        keep_alive = False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            value = value.strip().lower()
            if name == "content-length":
                # A negative length failed deep in the read, and two that disagree left the
                # rest of a body to be taken for the next message.
                if not (value.isdigit() and value.isascii()):
                    raise ValueError(f"Content-Length {value[:40]} is not a whole number of bytes")
                if self.length is not None and self.length != int(value):
                    raise ValueError(f"Content-Length {self.length} and {int(value)} disagree")
                self.length = int(value)
            elif name == "transfer-encoding" and "chunked" in value:
                self.chunked = True
            elif name == "connection":
                tokens = {t.strip() for t in value.split(",")}
                self.close = self.close or "close" in tokens
                keep_alive = keep_alive or "keep-alive" in tokens
            elif name == "expect" and value == "100-continue":
                self.expect_continue = True
        # HTTP/1.0 closes after each message unless it asks otherwise: kept open, a 1.0
        # client that reads its answer to the end of the connection (ab) waited for good.
        version = self.start_line.split(" ", 1)[0] if response else self.start_line[-8:]
        if version == "HTTP/1.0" and not keep_alive:
            self.close = True


def _is_status(text: str) -> bool:
    return len(text) == 3 and text.isdigit() and text.isascii()


def interim(head: bytes) -> bool:
    """Whether a response head is an interim one (``100 Continue``, ``103 Early Hints``):
    the final answer follows on the same connection. 101 ends HTTP there, so not it."""
    status = head.split(b" ", 2)[1:2]
    return bool(status) and status[0].startswith(b"1") and status[0] != b"101"


async def read_head(reader: asyncio.StreamReader) -> bytes | None:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return None
    except asyncio.LimitOverrunError:
        raise HeadTooLarge(f"HTTP head over {MAX_HEAD // 1024} KiB") from None


class HeadTooLarge(ConnectionError):
    """A message head past ``MAX_HEAD`` (a ConnectionError: from upstream, a 502)."""


async def discard_head(reader: asyncio.StreamReader) -> None:
    """Read the rest of an oversized head (at most 1 MiB more, 1 s), so that closing
    after the answer does not reset the connection with the answer unread."""
    seen = b""
    with contextlib.suppress(TimeoutError, ConnectionError):
        async with asyncio.timeout(1.0):
            for _ in range(16):
                chunk = await reader.read(MAX_HEAD)
                if not chunk or b"\r\n\r\n" in seen[-3:] + chunk:
                    return
                seen = chunk


async def read_body(
    reader: asyncio.StreamReader, msg: Message, *, until_eof: bool, idle_s: float | None = None
) -> bytes:
    """The raw body bytes exactly as framed (chunk markers kept). ``idle_s``: the longest
    the sender may stay silent (TimeoutError past it), however long the whole body takes."""
    if msg.chunked:
        parts = []
        while True:
            async with asyncio.timeout(idle_s):
                size_line = await _line(reader)
            parts.append(size_line)
            size = _chunk_size(size_line)
            if size == 0:
                # Trailers, then the final empty line.
                while True:
                    async with asyncio.timeout(idle_s):
                        line = await _line(reader)
                    parts.append(line)
                    if line == b"\r\n":
                        return b"".join(parts)
            parts.append(await _exactly(reader, size + 2, idle_s))
    if msg.length is not None:
        return await _exactly(reader, msg.length, idle_s)
    if not until_eof:
        return b""
    parts = []
    while True:
        async with asyncio.timeout(idle_s):
            piece = await reader.read(_PIECE)
        if not piece:
            return b"".join(parts)
        parts.append(piece)


# How much of a body is read at once when the sender's silences are timed.
_PIECE = 1 << 20


async def _exactly(reader: asyncio.StreamReader, n: int, idle_s: float | None) -> bytes:
    """``n`` bytes, each piece within ``idle_s`` of the last: a body bound as a whole
    was a 504 for any upstream that took longer to send it all, however steadily."""
    if idle_s is None:
        return await reader.readexactly(n)
    parts: list[bytes] = []
    left = n
    while left:
        async with asyncio.timeout(idle_s):
            piece = await reader.read(min(left, _PIECE))
        if not piece:
            raise asyncio.IncompleteReadError(b"".join(parts), n)
        parts.append(piece)
        left -= len(piece)
    return b"".join(parts)


async def _line(reader: asyncio.StreamReader) -> bytes:
    """A chunk-size or trailer line; one past the reader's limit is a ValueError, not
    asyncio's LimitOverrunError (a traceback in the log and a bare close)."""
    try:
        return await reader.readuntil(b"\r\n")
    except asyncio.LimitOverrunError:
        raise ValueError(f"a chunk-size or trailer line over {MAX_HEAD // 1024} KiB") from None


def _chunk_size(line: bytes) -> int:
    text = line.split(b";")[0].strip()
    if not text or text.strip(b"0123456789abcdefABCDEF"):
        raise ValueError(f"chunk size {line[:40]!r} is not a hexadecimal number")
    return int(text, 16)


def problem(exc: BaseException) -> str:
    """What went wrong, in words: "Connection refused" rather than asyncio's wording."""
    if isinstance(exc, OSError):
        if exc.errno is not None and exc.errno > 0:
            return os.strerror(exc.errno)
        if exc.strerror:  # getaddrinfo's errors have negative numbers of their own
            return exc.strerror
    return str(exc)


async def answer(
    writer: asyncio.StreamWriter, status: str, payload: bytes, content_type: str = "text/plain"
) -> bool:
    """Answer ``status`` (``"502 Bad Gateway"``) with ``payload`` and close: False, for the
    proxy's request loop."""
    writer.write(
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
        + payload
    )
    await writer.drain()
    return False


async def answer_error(writer: asyncio.StreamWriter, status: str, text: str) -> bool:
    """Answer ``status`` with ``text`` as the body and close: False."""
    return await answer(writer, status, text.encode())


def short_chunked(body: bytes) -> bytes:
    """A chunked ``body`` (markers kept, as :func:`read_body` returns it) cut to the first
    half of its data, framed again as one chunk and its end: short, yet complete."""
    data = []
    pos = 0
    while True:
        eol = body.index(b"\r\n", pos)
        size = _chunk_size(body[pos:eol])
        if size == 0:
            break
        data.append(body[eol + 2 : eol + 2 + size])
        pos = eol + 2 + size + 2
    whole = b"".join(data)
    half = whole[: len(whole) // 2]
    return (b"%x\r\n%s\r\n" % (len(half), half) if half else b"") + b"0\r\n\r\n"


def with_length(head: bytes, length: int) -> bytes:
    lines = head.split(b"\r\n")
    for i, line in enumerate(lines):
        if line.lower().startswith(b"content-length:"):
            lines[i] = b"Content-Length: " + str(length).encode()
    return b"\r\n".join(lines)
