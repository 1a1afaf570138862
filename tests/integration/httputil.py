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
    """The folder ``root`` over HTTP/1.1, keep-alive, with Range, HEAD and
    ``gzip_static always``; the class attributes say how it differs from nginx."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else a kept connection's answers wait ~40 ms for an ACK
    root = Path()
    etags = True  # False: no ETag (Apache's "FileETag None", some CDNs)
    weak = False  # W/"..." tags
    tag_seconds = False  # tags of the whole seconds of the file's mtime, as nginx builds them
    modified = True  # False: no Last-Modified either
    lengths = True  # False: no Content-Length, the body ends with the connection
    ranges = True  # False: a Range header is ignored (200, the whole file), as http.server
    token = ""  # asked of /resolve/ paths where set (a bearer token)
    requests: list[str] | None = None  # where set: each "GET /path", "HEAD /path"

    def _resolve(self) -> None:
        """As the Hugging Face Hub's resolve URLs: a redirect to a signed CDN URL, for the
        holder of the token (a private repository) where one is set."""
        if self.token and self.headers.get("Authorization") != f"Bearer {self.token}":
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(302)
        self.send_header("Location", f"/{self.path[len('/resolve/') :]}?sig=x&expires=9")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _answer(self, body: bool) -> None:
        if self.requests is not None:
            self.requests.append(f"{self.command} {self.path}")
        if self.path.startswith("/resolve/"):
            self._resolve()
            return
        path = self.root / unquote(self.path.lstrip("/").partition("?")[0])  # decodes %20
        encoded = path.with_name(path.name + ".gz")
        if encoded.is_file():
            path = encoded
        if not path.is_file():
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data, st = path.read_bytes(), path.stat()
        status, first, last = 200, 0, len(data) - 1
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
        m = m if self.ranges else None
        if m:
            status, first = 206, int(m.group(1))
            last = min(int(m.group(2) or last), last)
        self.send_response(status)
        if self.etags:
            stamp = int(st.st_mtime) if self.tag_seconds else st.st_mtime_ns
            tag = f'"{stamp:x}-{len(data):x}"'
            self.send_header("ETag", f"W/{tag}" if self.weak else tag)
        if self.modified:
            self.send_header("Last-Modified", self.date_time_string(int(st.st_mtime)))
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
    """Serve ``root`` (``how``: :class:`Static`'s class attributes) for the block; its
    base URL."""
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
