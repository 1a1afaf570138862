"""What a request to an object store names, and what its answer must match.

A :data:`Request` is a key or ``(key, offset, length)``; :class:`ObjectInfo` is
an object's size and entity tag as a HEAD, a GET or a listing reports them. The
checks here turn a bad range into a :class:`~headrace.errors.ConfigError` before
anything is sent, and a body of the wrong length into the error it means: a
read past the end (:class:`~headrace.errors.ReadEOFError`, permanent) or a body
cut short in transit (:class:`~headrace.errors.TransientStorageError`, retried).
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

from headrace.errors import ConfigError, ReadEOFError, StorageError, TransientStorageError
from headrace.io._ranges import whole_number

__all__ = [
    "ObjectInfo",
    "Request",
    "check_range",
    "drop_folder_markers",
    "eof_with_size",
    "info_of",
    "item_key",
    "normalize",
    "short_read",
]

Request = str | tuple[str, int, int]
"""A whole object by key, or ``(key, offset, length)``."""


class ObjectInfo(NamedTuple):
    """An object's size and entity tag (``None`` where the store gives none).

    The tag is without the quotes HTTP puts around it: Azure and GCS list an
    object's tag bare but send it quoted in a response's ``ETag`` header, and a
    tag from a listing must compare equal to the one a later GET sees.
    """

    size: int
    etag: str | None


def info_of(meta: Mapping[str, Any]) -> ObjectInfo:
    """``ObjectInfo`` of obstore's metadata (from a HEAD, a GET or a listing).

    An HTTP server may send ``Last-Modified`` and no ETag (Apache's ``FileETag None``,
    some CDNs): that time is the tag then, a weak one (``W/"..."``: equal times say
    nothing of equal bytes, so it is never cached on), so a file replaced by one of
    the same size mid-run is refused as changed; until 2026-12-07 its size alone was
    checked and its new bytes read on. obstore gives the epoch for no Last-Modified.
    """
    etag = meta.get("e_tag")
    if etag is not None and len(etag) >= 2 and etag[0] == etag[-1] == '"':
        etag = etag[1:-1]
    when = meta.get("last_modified")
    if etag is None and isinstance(when, datetime) and when.timestamp() > 0:
        etag = f'W/"last-modified {when.isoformat()}"'
    return ObjectInfo(int(meta["size"]), etag)


# A listing's (key, info) and an info's size (ObjectInfo's first field), got in C.
item_key, _info, _size = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(0)


def drop_folder_markers(
    listed: list[tuple[str, ObjectInfo]], prefix: str = ""
) -> list[tuple[str, ObjectInfo]]:
    """``listed`` (sorted keys under ``prefix``) less the folder markers in it.

    An S3 or GCS console's "Create folder" (and Hadoop's S3A) store an empty object
    named ``folder/``; obstore lists it without its slash, as the prefix itself (``""``
    at the store's root) or as ``folder`` beside ``folder/a.jpg``. Such a key names no
    object (a GET of it is a 404) and no file of any local copy (a name cannot be a
    file and a folder at once): a raw-file dataset held every marker as a sample of 0
    bytes. An empty object whose name is no folder of another key is kept (an empty
    folder's marker cannot be told from it)."""
    # Only an empty object can be a marker: most listings have none, and keep every key
    # (looked for in C: 65-78 -> 30-37 ms for 100,000 keys; a pass over that many tuples
    # costs ~17 ms of memory latency alone, 2c VM, 2026-12-06).
    if all(map(_size, map(_info, listed))):
        return listed
    keys = list(map(item_key, listed))
    top = prefix.rstrip("/")

    def folder(key: str) -> bool:  # a key's folder: another key starts with it and a '/'
        at = bisect.bisect_left(keys, key + "/")
        return key == top or (at < len(keys) and keys[at].startswith(key + "/"))

    return [(k, i) for k, i in listed if i.size or not folder(k)]


def check_range(offset: int, length: int) -> tuple[int, int]:
    """``(offset, length)`` as Python ints, refused unless two integers >= 0: Python's or
    NumPy's (offsets from an index array were refused), not a bool (``True`` read from
    byte 1). Python's: an ``np.uint64`` offset plus an ``np.int64`` length is a float."""
    if not (whole_number(offset) and whole_number(length)) or offset < 0 or length < 0:
        raise ConfigError(
            f"A byte range needs integer offset >= 0 and length >= 0 "
            f"(got offset={offset!r}, length={length!r})."
        )
    return int(offset), int(length)


def normalize(request: Request) -> tuple[str, int, int] | str:
    if isinstance(request, str):
        return request
    if isinstance(request, tuple) and len(request) == 3 and isinstance(request[0], str):
        return (request[0], *check_range(request[1], request[2]))
    raise ConfigError(f"A request is a key or a (key, offset, length) tuple (got {request!r}).")


def short_read(where: str, got: int, want: int, size: int | None, end: int) -> StorageError:
    """A read returned ``got`` of ``want`` bytes: past the end, or a body cut short."""
    if size is not None and end > size:
        return ReadEOFError(
            f"{where}: read past the end of the object (object has {size} bytes, "
            f"range ends at {end}; {got} of {want} bytes available)"
        )
    return TransientStorageError(
        f"{where}: response body was cut short ({got} of {want} bytes"
        + ("" if size is None else f"; object has {size} bytes")
        + ")"
    )


def check_encoding(where: str, attributes: Mapping[str, Any]) -> None:
    """Refuse a body sent with a content coding: it is not the object's bytes.

    obstore asks for none (no ``Accept-Encoding``) and decodes none, so a ``gzip``
    body comes from a server that encodes unasked (nginx's ``gzip_static always``) or
    an object stored with ``Content-Encoding`` metadata (S3, GCS); read as the file,
    it was the gzip stream's bytes, without a word, until 2026-12-07. ``identity``
    changes nothing, nor does ``aws-chunked`` (an upload's framing, stored as metadata
    by some S3 clients; the body is the object's bytes).
    """
    coding = str(attributes.get("Content-Encoding") or "").strip()
    if coding.lower() in ("", "identity", "aws-chunked"):
        return
    raise StorageError(
        f"{where}: the server sent it encoded (Content-Encoding: {coding}), not as the "
        "bytes stored, and headrace does not decode a body; serve the file as it is (nginx: "
        "no gzip_static for it; S3, GCS: remove the object's Content-Encoding metadata, or "
        "upload it decoded) or read a local copy"
    )


def eof_with_size(exc: ReadEOFError, where: str, size: int | None, end: int) -> ReadEOFError:
    """The same EOF error, saying how big the object is when the server did not."""
    if size is None or "object has" in str(exc):
        return exc
    return ReadEOFError(
        f"{where}: read past the end of the object (object has {size} bytes, range ends at {end})"
    )
