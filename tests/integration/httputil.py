"""A folder served over plain HTTP on 127.0.0.1, as nginx serves one (no listing), for
the tests of sources reading ``http://`` URLs."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote


class Static(BaseHTTPRequestHandler):
    """The folder ``root`` over HTTP/1.1 with Range, HEAD and ``gzip_static always``."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    root = Path()
    etags = True  # False: Last-Modified alone (Apache's "FileETag None", some CDNs)
    lengths = True  # False: no Content-Length, the body ends with the connection

    def _answer(self, body: bool) -> None:
        path = self.root / unquote(self.path.lstrip("/"))
        encoded = path.with_name(path.name + ".gz")
        if encoded.is_file():
            path = encoded
        if not path.is_file():
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = path.read_bytes()
        status, first, last = 200, 0, len(data) - 1
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
        if m:
            status, first = 206, int(m.group(1))
            last = min(int(m.group(2) or last), last)
        self.send_response(status)
        if self.etags:
            self.send_header("ETag", f'"{path.stat().st_mtime_ns:x}-{len(data):x}"')
        self.send_header("Last-Modified", self.date_time_string(int(path.stat().st_mtime)))
        if path is encoded:
            self.send_header("Content-Encoding", "gzip")
        if m:
            self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
        if self.lengths:
            self.send_header("Content-Length", str(last + 1 - first))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if body:
            self.wfile.write(data[first : last + 1])

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serve(root: Path, **how: Any) -> Iterator[str]:
    """Serve ``root`` (``how``: :class:`Static`'s ``etags``, ``lengths``) for the block;
    its base URL."""
    handler = type("Handler", (Static,), {"root": root, **how})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
