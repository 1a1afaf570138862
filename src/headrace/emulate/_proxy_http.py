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
    """An HTTP/1.1 message head plus how its body is framed."""

    __slots__ = ("chunked", "close", "expect_continue", "head", "length", "start_line")

    def __init__(self, head: bytes) -> None:
        self.head = head
        lines = head.decode("latin-1").split("\r\n")
        self.start_line = lines[0]
        self.length: int | None = None
        self.chunked = False
        self.close = False
        self.expect_continue = False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            value = value.strip().lower()
            if name == "content-length":
                self.length = int(value)
            elif name == "transfer-encoding" and "chunked" in value:
                self.chunked = True
            elif name == "connection" and value == "close":
                self.close = True
            elif name == "expect" and value == "100-continue":
                self.expect_continue = True


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


async def read_body(reader: asyncio.StreamReader, msg: Message, *, until_eof: bool) -> bytes:
    """The raw body bytes exactly as framed (chunk markers kept)."""
    if msg.chunked:
        parts = []
        while True:
            size_line = await reader.readuntil(b"\r\n")
            parts.append(size_line)
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                # Trailers, then the final empty line.
                while True:
                    line = await reader.readuntil(b"\r\n")
                    parts.append(line)
                    if line == b"\r\n":
                        return b"".join(parts)
            parts.append(await reader.readexactly(size + 2))
    if msg.length is not None:
        return await reader.readexactly(msg.length)
    return await reader.read() if until_eof else b""


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
        size = int(body[pos:eol].split(b";")[0].strip(), 16)
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
