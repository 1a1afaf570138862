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
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from typing import Any

__all__ = ["main", "patch_moto"]


def patch_moto() -> None:
    """Take moto's module listing once; log werkzeug's warnings and errors only."""
    from moto import backends

    listing = getattr(backends, "list_of_moto_modules", None)
    if listing is not None:  # a moto that moved it serves as before, only slower
        modules = frozenset(listing())
        backends.list_of_moto_modules = lambda: modules
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    _ranged_gets()


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


def main(argv: list[str] | None = None) -> None:
    """``python -m moto.server ARGS``, patched."""
    patch_moto()
    from moto.server import main as moto_main

    moto_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
