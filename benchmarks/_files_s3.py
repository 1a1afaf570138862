"""A read-only S3 endpoint over a local folder, for benchmarks whose objects are large.

moto reads a whole object for every ranged GET (a GET of 64 KiB from a 300 MiB
object took ~150 ms more than the proxy's 50 ms), so a benchmark of
many small GETs into large objects measures moto. This serves ``GET`` (ranges
included), ``HEAD`` and ``ListObjectsV2`` of the files in one folder as the
objects of every bucket, reading only the bytes asked for; requests are not
authenticated. Put a ``LatencyProxy`` in front for a remote store's round trips.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

_NAMES: dict[str, list[str]] = {}
_ITEMS: dict[str, str] = {}


def _names(root: str) -> list[str]:
    """Every file's name under ``root``, sorted as S3 sorts keys (by code point)."""
    if root not in _NAMES:
        walk = os.walk(root)
        names = (os.path.relpath(os.path.join(d, f), root) for d, _, fs in walk for f in fs)
        _NAMES[root] = sorted(names)
    return _NAMES[root]


def _handler(root: str) -> type[BaseHTTPRequestHandler]:
    root = os.path.abspath(root)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body are two writes

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _path(self) -> tuple[str, str, dict[str, list[str]]]:
            parts = urlsplit(self.path)
            bucket, _, key = unquote(parts.path).lstrip("/").partition("/")
            return bucket, key, parse_qs(parts.query)

        def _meta(self, path: str) -> tuple[int, str, str]:
            st = os.stat(path)
            tag = hashlib.md5(f"{path}{st.st_size}{st.st_mtime_ns}".encode()).hexdigest()
            return st.st_size, f'"{tag}"', formatdate(st.st_mtime, usegmt=True)

        def _send(self, code: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(code)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _item(self, name: str) -> str:
            """A key's ``<Contents>``, made once (a listing's cost is the store's round
            trips, not this server's stats)."""
            if name not in _ITEMS:
                size, tag, _ = self._meta(os.path.join(root, name))
                _ITEMS[name] = (
                    f"<Contents><Key>{escape(name)}</Key><Size>{size}</Size>"
                    f"<ETag>{escape(tag)}</ETag>"
                    "<LastModified>2026-01-01T00:00:00.000Z</LastModified></Contents>"
                )
            return _ITEMS[name]

        def _list(self, query: dict[str, list[str]]) -> None:
            """ListObjectsV2 as S3 pages it: ``max-keys`` (at most 1,000) keys and common
            prefixes a page, ``continuation-token`` (here the page's last name),
            ``start-after`` and ``delimiter``. The folder's names are read once, at the
            first listing: the served folder must not change after it."""
            q = {k: v[0] for k, v in query.items()}
            prefix, delim = q.get("prefix", ""), q.get("delimiter", "")
            after = max(q.get("start-after", ""), q.get("continuation-token", ""))
            most = min(int(q.get("max-keys", 1000)), 1000)
            names = _names(root)
            i = bisect.bisect_right(names, after) if after else bisect.bisect_left(names, prefix)
            keys: list[str] = []
            common: list[str] = []
            last = ""
            while i < len(names) and len(keys) + len(common) < most:
                name = names[i]
                if not name.startswith(prefix):
                    break
                cut = name.find(delim, len(prefix)) if delim else -1
                if cut >= 0:  # the whole common prefix at once: skip past its names
                    common.append(name[: cut + 1])
                    last = name[: cut + 1]
                    i = bisect.bisect_left(names, last + "\U0010ffff")
                    continue
                keys.append(name)
                last = name
                i += 1
            more = i < len(names) and names[i].startswith(prefix)
            items = [self._item(name) for name in keys]
            items += [
                f"<CommonPrefixes><Prefix>{escape(c)}</Prefix></CommonPrefixes>" for c in common
            ]
            token = f"<NextContinuationToken>{escape(last)}</NextContinuationToken>" if more else ""
            xml = (
                '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>'
                f"<KeyCount>{len(keys) + len(common)}</KeyCount>"
                f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>{token}"
                + "".join(items)
                + "</ListBucketResult>"
            )
            self._send(200, xml.encode(), {"Content-Type": "application/xml"})

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            _, key, query = self._path()
            if not key:  # ListObjectsV2
                self._list(query)
                return
            path = os.path.normpath(os.path.join(root, key))  # a key is a path under root
            if not path.startswith(os.path.join(root, "")) or not os.path.isfile(path):
                self._send(404, b"<Error><Code>NoSuchKey</Code></Error>", {})
                return
            size, tag, modified = self._meta(path)
            headers = {"ETag": tag, "Last-Modified": modified, "Accept-Ranges": "bytes"}
            rng = self.headers.get("Range")
            lo, hi, code = 0, size - 1, 200
            if rng and rng.startswith("bytes="):
                a, _, b = rng[6:].partition("-")
                if a:
                    lo, hi = int(a), min(size - 1, int(b)) if b else size - 1
                else:
                    lo = max(0, size - int(b))
                code = 206
                headers["Content-Range"] = f"bytes {lo}-{hi}/{size}"
            if self.command == "HEAD":
                self.send_response(200)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                return
            with open(path, "rb") as f:
                f.seek(lo)
                body = f.read(hi - lo + 1)
            self._send(code, body, headers)

    return Handler


class _Server(ThreadingHTTPServer):
    # The proxy opens a connection per request: past a listen backlog of 5 (the
    # default), a connection waited a second for its SYN to be sent again.
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client gone mid-reply (a GET cancelled when a source closes) is not an
        # error of the server's: no traceback for it.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def _serve(root: str) -> None:
    """Serve until stdin closes, the endpoint printed as one JSON line."""
    server = _Server(("127.0.0.1", 0), _handler(root))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(json.dumps({"endpoint": f"http://127.0.0.1:{server.server_address[1]}"}), flush=True)
    sys.stdin.read()
    server.shutdown()


def store_options(endpoint: str) -> dict[str, object]:
    """``store_options`` for a table or source read from ``endpoint`` (this server, or
    a ``LatencyProxy`` in front of it)."""
    return {
        "endpoint": endpoint,
        "region": "us-east-1",
        "access_key_id": "bench",
        "secret_access_key": "bench",
        "path_style": True,
        "allow_http": True,
    }


@contextmanager
def files_s3(root: str) -> Iterator[str]:
    """Serve ``root``'s files as S3 objects on 127.0.0.1 from a child process (not
    competing for the GIL with what is timed); yields the endpoint."""
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), root],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        yield str(json.loads(proc.stdout.readline())["endpoint"])
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


if __name__ == "__main__":
    _serve(sys.argv[1])
