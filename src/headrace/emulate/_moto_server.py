"""moto's S3 server as :class:`~headrace.emulate.LocalS3` runs it, less two costs per request.

moto 5's dispatcher looks each request's service up under a lock with
``backends.list_of_moto_modules()``, a generator that lists moto's package folder and
``stat``\\ s its ~170 entries every time: a path-style request to 127.0.0.1 names no
service in its host, so every request pays the scan twice (2-8 ms on a 2-core host, a
third of moto's time per ranged GET) and the lock makes the requests wait on each other.
The folder does not change while the server runs, so its listing is taken once.

werkzeug also logs a line per request through :mod:`logging` (a tenth of moto's time);
nobody reads them (the server's output is kept only for the message of a failed start),
so only warnings and errors are logged.

And a ranged GET read the whole object: moto answers it with ``key.value``, every byte
of the object (from a temporary file past 5 MiB), and then slices the range out of it:
66 ms of moto's CPU for 64 KiB of a 64 MiB object, 2.2 ms of a 1 MiB one (2c,
2026-12-05). Inside ``get_object`` for one range, ``key.value`` is a :class:`_Range`,
which reads the bytes the slice asks for and no others.

And werkzeug closes every connection after its response ("Connection: close"), so each
request paid a new TCP connection and a new thread: a connection that sent no body (a
GET, HEAD or DELETE: nothing of it can be left unread to be taken for the next request)
stays open for the client's next request, as S3's do. 2,000 ranged GETs of 64 KiB from 8
threads: 0.94 ms of moto's CPU a request against 1.25 before (medians of 3 alternating
runs, 2c, 2026-12-05). A request with a body still closes its connection.

A kept connection's sockets send without Nagle's delay (``TCP_NODELAY``): werkzeug
writes a response's head and body apart, and the body waited for the client to
acknowledge the head, which Linux delays up to 40 ms on a connection past its first
exchange. Every ranged GET but a connection's first took 44 ms where a HEAD took 2-3,
and 2.6 ms with the option (medians of 50, 2c, 2026-12-06).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from typing import Any

__all__ = ["main", "patch_moto"]


def patch_moto() -> None:
    """Take moto's module listing once; log werkzeug's warnings and errors only; read a
    ranged GET's range only; keep connections that sent no body open, sending at once."""
    from moto import backends

    listing = getattr(backends, "list_of_moto_modules", None)
    if listing is not None:  # a moto that moved it serves as before, only slower
        modules = frozenset(listing())
        backends.list_of_moto_modules = lambda: modules
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    _ranged_gets()
    _keep_alive()


#: One range a GET's whole answer is sliced by in moto: ``bytes=a-b`` (a <= b),
#: ``bytes=a-`` or ``bytes=-n``. Others (several ranges, ``a > b``) moto answers with the
#: whole object, which they still read whole.
_ONE_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def _one_range(header: str | None) -> bool:
    m = _ONE_RANGE.fullmatch(header or "")
    if m is None or m.group(1) == m.group(2) == "":
        return False
    return not (m.group(1) and m.group(2) and int(m.group(1)) > int(m.group(2)))


class _Range:
    """A key's value as moto's range handling uses it: its length, and a slice of it read
    from the key's buffer (under the key's lock, as moto reads it)."""

    __slots__ = ("_key",)

    def __init__(self, key: Any) -> None:
        self._key = key

    def __len__(self) -> int:
        return int(self._key.contentsize)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __getitem__(self, where: slice) -> bytes:
        start, stop, _ = where.indices(len(self))  # moto slices [begin : end + 1]
        with self._key.lock:
            buffer = self._key._value_buffer
            buffer.seek(start)
            return bytes(buffer.read(max(0, stop - start)))


def _ranged_gets() -> None:
    """A GET of one range reads that range of the object only (see the module's text)."""
    from moto.s3.models import FakeKey
    from moto.s3.responses import S3Response

    value, get_object = FakeKey.__dict__.get("value"), S3Response.__dict__.get("get_object")
    if not isinstance(value, property) or value.fget is None or get_object is None:
        return  # another moto: served as before, only slower
    local = threading.local()
    whole = value.fget

    def ranged_value(key: Any) -> Any:
        return _Range(key) if getattr(local, "ranged", False) else whole(key)

    def ranged_get_object(self: Any) -> Any:
        local.ranged = _one_range(self.headers.get("range")) and not self._get_int_param(
            "partNumber"
        )
        try:
            return get_object(self)
        finally:
            local.ranged = False

    setattr(FakeKey, "value", property(ranged_value, value.fset))  # noqa: B010 (mypy: a method)
    setattr(S3Response, "get_object", ranged_get_object)  # noqa: B010


def _keep_alive() -> None:
    """Keep a connection open after a request that sent no body, and send its answers
    without Nagle's delay (see the module's text)."""
    import selectors

    from werkzeug import serving

    handler = serving.WSGIRequestHandler
    if not hasattr(serving, "selectors"):  # another werkzeug: connections closed as before
        return
    send_header, run_wsgi = handler.send_header, handler.run_wsgi
    local = threading.local()

    class Idle:
        """A selector with nothing to read: werkzeug's drain after a kept response."""

        def register(self, *args: Any) -> None:
            pass

        def select(self, timeout: float | None = None) -> list[Any]:  # noqa: ARG002
            return []

        def close(self) -> None:
            pass

    class Selectors:
        """``selectors`` as werkzeug.serving sees it: no drain of a kept connection,
        which would read the client's next request as the rest of this one's body."""

        def __getattr__(self, name: str) -> Any:
            return getattr(selectors, name)

        def DefaultSelector(self) -> Any:  # the name werkzeug calls
            return Idle() if getattr(local, "keep", False) else selectors.DefaultSelector()

    def run(self: Any) -> None:
        headers = self.headers
        local.keep = (
            self.request_version == "HTTP/1.1"
            and headers.get("Content-Length", "0").strip() == "0"
            and "Transfer-Encoding" not in headers
        )
        try:
            run_wsgi(self)
        finally:
            local.keep = False

    def header(self: Any, keyword: str, value: str) -> None:
        if keyword == "Connection" and value == "close" and getattr(local, "keep", False):
            return  # not closed: http.server reads the client's next request
        send_header(self, keyword, value)

    setattr(serving, "selectors", Selectors())  # noqa: B010
    setattr(handler, "run_wsgi", run)  # noqa: B010
    setattr(handler, "send_header", header)  # noqa: B010
    handler.disable_nagle_algorithm = True


def main(argv: list[str] | None = None) -> None:
    """``python -m moto.server ARGS``, patched."""
    patch_moto()
    from moto.server import main as moto_main

    moto_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
