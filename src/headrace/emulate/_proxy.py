"""An HTTP proxy on 127.0.0.1 that makes a local endpoint look remote, and breaks it on purpose.

It parses each HTTP/1.1 request (so faults and counters are per request, not per
TCP chunk), waits ``latency_ms`` before forwarding it, forwards it upstream, and
relays the response, optionally paced by a bandwidth cap shared by all connections
(one emulated link). A client connection has one upstream connection at a time, kept
after a request without a body whose response ended framed and kept open (as a client
keeps its own to the store), so the store sees a client's connections as the client
made them: not a new one per request (which cost moto 1.5 times the CPU a GET), nor a
handshake more per request in front of a remote store. A request that meets its kept
connection closed by the store before any answer goes out once more on a new one.

Fault injection follows :class:`FaultRule` s: a rule matches requests whose
request line contains ``match``, fires on every ``every``-th matching request
(or on a seeded random ``fraction`` of them), at most ``limit`` times, and then
answers with an error status, drops the connection, truncates the body or
stalls (``headrace.emulate._proxy_faults``). Counters are in :class:`ProxyStats`.
The HTTP/1.1 framing it needs is in ``headrace.emulate._proxy_http``.

The proxy runs its own event loop on a daemon thread; :meth:`LatencyProxy.close`
stops the server, cancels open connections and joins the thread.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Self
from urllib.parse import urlsplit

from headrace._closing import Closing
from headrace._messages import said
from headrace.emulate._proxy_faults import SLOW_DOWN, FaultRule, RuleState, error_body
from headrace.emulate._proxy_http import (
    MAX_HEAD,
    HeadTooLarge,
    Message,
    answer,
    answer_error,
    discard_head,
    interim,
    problem,
    read_body,
    read_head,
    short_chunked,
    with_length,
)
from headrace.errors import ConfigError, HeadraceError, StorageError

__all__ = ["FaultRule", "LatencyProxy", "ProxyStats", "main"]

_CHUNK = 64 * 1024


@dataclass(slots=True)
class ProxyStats:
    """Counters since start (or the last :meth:`LatencyProxy.reset_stats`)."""

    connections: int = 0
    upstream_connections: int = 0
    requests: int = 0
    faults: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    max_in_flight: int = 0
    in_flight: int = 0
    throttled: int = 0
    faults_by_kind: dict[str, int] = field(default_factory=dict)


class _Link:
    """One shared link: each chunk reserves ``n / rate`` seconds of its time."""

    def __init__(self, mbps: float | None) -> None:
        self.rate = mbps * 1e6 if mbps else 0.0
        self.free_at = 0.0

    async def pace(self, n: int) -> None:
        if not self.rate:
            return
        now = time.monotonic()
        start = max(now, self.free_at)
        self.free_at = start + n / self.rate
        await asyncio.sleep(self.free_at - now)


class LatencyProxy(Closing):
    """A per-request latency, bandwidth and fault proxy in front of ``upstream``.

    ``upstream`` is ``http://host:port``. ``latency_ms`` is paid once per request
    before it is forwarded (a one-way floor); ``mbps`` caps the response bytes
    of all connections together, in megabytes (10**6 B) per second.
    ``upstream_timeout_s`` bounds how long the upstream may stay silent (to
    connect and send its response head, then between pieces of its body, however
    long the whole body takes): past it the
    client gets ``504 Gateway Timeout`` (its body says whether the head or
    the rest of the body was late) instead of waiting forever on a hung
    upstream. An upstream that refuses the connection, cannot be resolved,
    closes or resets it before its response is complete, or sends a malformed
    head is answered ``502 Bad Gateway``, with a body naming the upstream and
    the problem. A client whose request head is over 64 KiB gets ``431``, one
    with a malformed head ``400``. ``max_concurrent`` makes a
    store with a request limit, as an S3 prefix has: a request that arrives
    while that many are being served is answered ``503 SlowDown`` (after the
    latency, as a real answer would be), counted in ``throttled``.
    """

    def __init__(
        self,
        upstream: str,
        *,
        latency_ms: float = 0.0,
        mbps: float | None = None,
        faults: Sequence[FaultRule] = (),
        port: int = 0,
        upstream_timeout_s: float = 30.0,
        max_concurrent: int | None = None,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ConfigError(f"Proxy upstream must be http://host:port (got {upstream!r}).")
        try:
            up_port = parts.port
            if up_port == 0:  # was taken for no port: 80
                raise ValueError("port 0")
        except ValueError as exc:  # "http://host:abc": urllib's ValueError, a traceback
            raise ConfigError(
                f"Proxy upstream {upstream!r} has no valid port ({exc}); give http://host:port "
                "with a port in 1-65535."
            ) from None
        if parts.path.strip("/") or parts.query or parts.fragment:
            # Each request goes upstream with its own path: "/minio" here was left out.
            raise ConfigError(
                f"Proxy upstream {upstream!r} has a path; the proxy forwards each request's "
                "own path to host:port, so give http://host:port only."
            )
        # Finite, not only >= 0: NaN passed a comparison and injected no latency at all,
        # an infinite latency hung every request (a "stall" FaultRule does that on purpose).
        if not 0 <= latency_ms < math.inf:
            raise ConfigError(
                f"latency_ms must be a finite number >= 0 (got {latency_ms}); e.g. latency_ms=50."
            )
        if mbps is not None and not 0 < mbps < math.inf:
            raise ConfigError(
                f"mbps must be a finite number > 0 or None (got {mbps}); None for no cap."
            )
        if not upstream_timeout_s > 0:
            raise ConfigError(f"upstream_timeout_s must be > 0 (got {upstream_timeout_s}).")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            # bind()'s OverflowError, a traceback from start(), before.
            raise ConfigError(f"port must be in 0-65535, 0 for a free one (got {port!r}).")
        if max_concurrent is not None and max_concurrent < 1:
            raise ConfigError(f"max_concurrent must be >= 1 or None (got {max_concurrent}).")
        self.max_concurrent = max_concurrent
        self.upstream_timeout_s = float(upstream_timeout_s)
        self.upstream = upstream
        self._up_host = parts.hostname
        self._up_port = 80 if up_port is None else up_port
        self.latency_ms = latency_ms
        self._link = _Link(mbps)
        self._rules = [RuleState(r) for r in faults]
        self._stats = ProxyStats()
        self._lock = threading.Lock()
        self._port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Self:
        if self._thread is not None:
            return self
        # Again after close(): the event was set, and start() returned before the new loop
        # was up (port read the closed server; a close() then waited for good).
        self._ready.clear()
        self._loop = self._server = None
        self._thread = threading.Thread(target=self._run, name="headrace-proxy", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            self._thread = None
            error, self._error = self._error, None  # a later start() tries afresh
            raise error
        return self

    def close(self) -> None:
        loop, thread = self._loop, self._thread
        if thread is None or loop is None:
            return
        if not loop.is_closed():
            loop.call_soon_threadsafe(self._shutdown)
        thread.join()
        self._thread = None
        self._server = None  # port: "not running", not an IndexError of the closed server

    def __enter__(self) -> Self:  # starts it, unlike Closing's
        return self.start()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("proxy is not running; call start() first")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- faults and counters -----------------------------------------------------------------

    def set_faults(self, faults: Sequence[FaultRule]) -> None:
        """Replace the fault rules (their counters start from zero)."""
        with self._lock:
            self._rules = [RuleState(r) for r in faults]

    @property
    def stats(self) -> ProxyStats:
        """A snapshot of the counters."""
        with self._lock:
            return replace(self._stats, faults_by_kind=dict(self._stats.faults_by_kind))

    def reset_stats(self) -> None:
        with self._lock:
            self._stats = ProxyStats()

    # -- event loop thread -------------------------------------------------------------------

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(self._serve, "127.0.0.1", self._port, limit=MAX_HEAD)
            )
        except OSError as exc:  # reported to start(): a port in use, most likely
            self._error = StorageError(
                exc.errno, f"LatencyProxy: cannot listen on 127.0.0.1:{self._port}: {problem(exc)}"
            )
            self._error.__cause__ = exc
            loop.close()
            self._ready.set()
            return
        except BaseException as exc:  # reported to start()
            self._error = exc
            loop.close()
            self._ready.set()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            # Name lookups (an upstream given by host name) ran on the default
            # executor's thread; without this it outlives the proxy.
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    def _shutdown(self) -> None:
        assert self._loop is not None
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()

        async def _drain() -> None:
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            if self._server is not None:
                await self._server.wait_closed()
            assert self._loop is not None
            self._loop.stop()

        self._loop.create_task(_drain())

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        with self._lock:
            self._stats.connections += 1
        kept = _Kept()
        try:
            while await self._one_request(reader, writer, kept):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            kept.close()
            writer.close()
            self._tasks.discard(task)

    def _pick_fault(self, request_line: str) -> FaultRule | None:
        with self._lock:
            self._stats.requests += 1
            for state in self._rules:
                if state.fires(request_line):
                    self._stats.faults += 1
                    kind = state.rule.kind
                    key = f"{kind}:{state.rule.status}" if kind == "status" else kind
                    self._stats.faults_by_kind[key] = self._stats.faults_by_kind.get(key, 0) + 1
                    return state.rule
        return None

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, kept: _Kept
    ) -> bool:
        """Relay one request; False when the client connection should close."""
        try:
            head = await read_head(reader)
        except HeadTooLarge as exc:
            # Answered as a server would (431), so a client sees why, not a bare close.
            await discard_head(reader)
            return await answer_error(writer, "431 Request Header Fields Too Large", str(exc))
        if head is None:
            return False
        try:
            request = Message(head)
        except ValueError as exc:
            return await answer_error(writer, "400 Bad Request", f"malformed request: {exc}")
        if request.expect_continue and (request.chunked or request.length):
            # The client sends its body only after this (botocore waits up to 1 s for it,
            # on every PutObject and UploadPart), and the body must be read here before
            # the request goes upstream; the store's own 100s are skipped in _forward.
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()
        try:
            body = await read_body(reader, request, until_eof=False)
        except ValueError as exc:  # a chunk size that is no number: was a bare close
            return await answer_error(writer, "400 Bad Request", f"malformed request body: {exc}")
        with self._lock:
            s = self._stats
            s.bytes_up += len(head) + len(body)
            busy = self.max_concurrent is not None and s.in_flight >= self.max_concurrent
            if busy:
                s.requests += 1
                s.throttled += 1
            else:
                s.in_flight += 1
                s.max_in_flight = max(s.max_in_flight, s.in_flight)
        if busy:
            if self.latency_ms:
                await asyncio.sleep(self.latency_ms / 1000.0)
            return await self._inject(SLOW_DOWN, writer)
        try:
            if self.latency_ms:
                await asyncio.sleep(self.latency_ms / 1000.0)
            fault = self._pick_fault(request.start_line)
            if fault is not None and fault.kind not in ("truncate", "short"):
                return await self._inject(fault, writer)
            cut = None if fault is None else fault.kind
            return await self._forward(request, head + body, writer, cut=cut, kept=kept)
        finally:
            with self._lock:
                # The counters it was counted in: a reset_stats() meanwhile starts new ones,
                # which a request of before the reset took below zero.
                s.in_flight -= 1

    async def _inject(self, fault: FaultRule, writer: asyncio.StreamWriter) -> bool:
        if fault.kind == "drop":
            return False
        if fault.kind == "stall":
            await asyncio.sleep(fault.stall_s)
            return False
        reason, payload = error_body(fault.status)
        return await answer(writer, f"{fault.status} {reason}", payload, "application/xml")

    async def _forward(
        self,
        request: Message,
        raw: bytes,
        writer: asyncio.StreamWriter,
        *,
        cut: str | None,
        kept: _Kept,
    ) -> bool:
        up_writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(self.upstream_timeout_s):
                head = None
                if (conn := kept.take()) is not None:
                    up_reader, up_writer = conn
                    head = await _exchange(up_reader, up_writer, raw)
                    if head is None:  # closed by the store meanwhile: a new connection
                        up_writer.close()
                        up_writer = None
                if up_writer is None:
                    up_reader, up_writer = await asyncio.open_connection(
                        self._up_host, self._up_port, limit=MAX_HEAD
                    )
                    with self._lock:
                        self._stats.upstream_connections += 1
                    up_writer.write(raw)
                    await up_writer.drain()
                    head = await read_head(up_reader)
                # A store answers a request that expects 100-continue with 100 Continue
                # first (moto twice), and may send 103 Early Hints: not the answer, whose
                # head follows. Taken for it, its "body" was read to the end of the
                # connection, a 504 where the store keeps connections open.
                while head is not None and interim(head):
                    head = await read_head(up_reader)
        except TimeoutError:
            if up_writer is not None:
                up_writer.close()
            return await answer_error(
                writer,
                "504 Gateway Timeout",
                f"upstream {self.upstream} sent no response within {self.upstream_timeout_s:g} s",
            )
        except (OSError, asyncio.IncompleteReadError) as exc:
            # Refused, unresolvable, reset or closed mid-head: nothing has reached the
            # client yet, so it gets an answer that names the upstream, not a bare close.
            if up_writer is not None:
                up_writer.close()
            what = "could not be reached" if up_writer is None else "failed before its response"
            return await answer_error(
                writer, "502 Bad Gateway", f"upstream {self.upstream} {what}: {problem(exc)}"
            )
        except BaseException:  # the proxy stopping: close the upstream too
            if up_writer is not None:
                up_writer.close()
            raise
        try:
            if head is None:
                return await answer_error(
                    writer,
                    "502 Bad Gateway",
                    f"upstream {self.upstream} closed the connection without a response",
                )
            try:
                response = Message(head, response=True)
            except ValueError as exc:
                return await answer_error(
                    writer,
                    "502 Bad Gateway",
                    f"upstream {self.upstream} sent a malformed response head: {exc}",
                )
            bodyless = request.start_line.startswith("HEAD ") or response.status in (204, 304)
            if bodyless:
                body = b""
            else:
                try:
                    body = await read_body(
                        up_reader, response, until_eof=True, idle_s=self.upstream_timeout_s
                    )
                except TimeoutError:
                    # Not a hang either; nothing has been relayed yet, so say why.
                    return await answer_error(
                        writer,
                        "504 Gateway Timeout",
                        f"upstream {self.upstream} sent only part of its response body "
                        f"within {self.upstream_timeout_s:g} s",
                    )
                except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                    # The body is relayed only once complete, so the client has seen
                    # nothing yet either.
                    return await answer_error(
                        writer,
                        "502 Bad Gateway",
                        f"upstream {self.upstream} failed in the middle of its response body: "
                        f"{problem(exc)}",
                    )
            if cut == "short" and body:
                # Half the data, framed as complete whatever the framing: a chunked
                # answer was relayed whole (while counted as a fault) until 2026-12-06.
                if response.chunked:
                    body = short_chunked(body)
                else:
                    body = body[: len(body) // 2]
                    if response.length is not None:
                        head = with_length(head, len(body))
            elif cut == "truncate" and body:
                # Full headers, half the body, then a closed connection: what a reset
                # mid-transfer looks like to the client.
                writer.write(head)
                writer.write(body[: len(body) // 2])
                await writer.drain()
                return False
            writer.write(head)
            await writer.drain()
            for i in range(0, len(body), _CHUNK):
                chunk = body[i : i + _CHUNK]
                await self._link.pace(len(chunk))
                writer.write(chunk)
                await writer.drain()
            with self._lock:
                self._stats.bytes_down += len(head) + len(body)
            # Keep the client connection only if the response's end was framed and
            # neither side asked to close it; the upstream one also only after a request
            # without a body (nothing of it can be left unsent to be taken for the next).
            framed = response.length is not None or response.chunked or bodyless
            keep = framed and not (response.close or request.close)
            if keep and len(raw) == len(request.head):
                kept.put(up_reader, up_writer)
            return keep
        finally:
            if not kept.holds(up_writer):
                up_writer.close()


class _Kept:
    """A client connection's upstream connection, kept for its next request."""

    __slots__ = ("_conn",)

    def __init__(self) -> None:
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    def put(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conn = (reader, writer)

    def take(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        conn, self._conn = self._conn, None
        return conn

    def holds(self, writer: asyncio.StreamWriter) -> bool:
        return self._conn is not None and self._conn[1] is writer

    def close(self) -> None:
        if (conn := self.take()) is not None:
            conn[1].close()


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, raw: bytes
) -> bytes | None:
    """``raw`` sent on a kept connection and the response head, or None where the store
    had closed (or reset) the connection before answering at all: sent again."""
    try:
        writer.write(raw)
        await writer.drain()
        return await read_head(reader)
    except (ConnectionResetError, BrokenPipeError):
        return None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m headrace.emulate._proxy --upstream URL [--latency-ms N] [--mbps N]``."""
    parser = argparse.ArgumentParser(prog="headrace-proxy", description=__doc__)
    parser.add_argument("--upstream", required=True, help="http://host:port to forward to")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--mbps", type=float, default=None)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--max-concurrent", type=int, default=None)
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        proxy = LatencyProxy(
            args.upstream,
            latency_ms=args.latency_ms,
            mbps=args.mbps,
            port=args.port,
            max_concurrent=args.max_concurrent,
        ).start()
    except HeadraceError as exc:  # a bad option or a port in use: a line, not a traceback
        print(f"headrace-proxy: {said(exc)}", file=sys.stderr)
        return 2
    with proxy:
        print(proxy.endpoint, flush=True)
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
        s = proxy.stats
        print(
            f"requests={s.requests} connections={s.connections} faults={s.faults} "
            f"bytes_down={s.bytes_down} max_in_flight={s.max_in_flight} "
            f"throttled={s.throttled}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
