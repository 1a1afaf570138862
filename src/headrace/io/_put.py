"""Writes to object storage: a local file streamed into one object, and an object's attributes.

Kept apart from the read paths of :class:`~headrace.io.ObjectStore` (which
calls these); both go through the same retry loop and error mapping.

A file larger than one part goes up as a multipart upload fed from a
generator that reads the file a megabyte at a time: obstore holds at most
``concurrency`` parts of ``part_bytes`` in memory, whatever the file's size.
A smaller file goes up in one PUT. Either way the object appears whole or not
at all (a multipart upload becomes visible only when it completes).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from headrace.io._obstore_missing import obstore_missing

try:
    import obstore as obs
    from obstore.store import AzureStore, GCSStore, MemoryStore, S3Store
except ModuleNotFoundError as exc:  # the optional extra: say which one
    raise obstore_missing(exc) from exc

from headrace.errors import ConfigError, StorageError
from headrace.io._object_info import ObjectInfo, info_of

if TYPE_CHECKING:
    from headrace.io._objects import ObjectStore

__all__ = ["PART_BYTES", "PART_CONCURRENCY", "get_attributes", "put_file", "takes_metadata"]

#: Bytes per part of a multipart upload (S3's smallest part is 5 MiB).
PART_BYTES = 8 << 20
#: Parts of one file in flight at once (memory: PART_BYTES x this, per file).
PART_CONCURRENCY = 4
_READ_BYTES = 1 << 20


def takes_metadata(store: Any) -> bool:
    """Whether objects in this obstore store carry user metadata (local files, HTTP do not)."""
    return isinstance(store, S3Store | GCSStore | AzureStore | MemoryStore)


def put_file(
    store: ObjectStore,
    key: str,
    path: str | os.PathLike[str],
    *,
    metadata: Mapping[str, str] | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> ObjectInfo:
    """Write the local file ``path`` as object ``key``; its size and ETag.

    ``on_bytes(n)`` is told of every ``n`` bytes handed to the upload (negative:
    an attempt that failed and is retried from the start).
    """
    live = store._live(key)
    where = store.where(key)
    attrs: Any = dict(metadata or {})
    if attrs and not takes_metadata(live):
        raise ConfigError(f"{where}: this store keeps no object metadata (got {sorted(attrs)}).")
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise StorageError(f"{path}: cannot upload to {where}: {exc.strerror}") from exc
    report = on_bytes or (lambda _n: None)

    def once() -> ObjectInfo:
        sent = 0
        try:
            f = open(path, "rb")  # closed by the with below, after the upload
        except OSError as exc:
            raise StorageError(f"{path}: cannot upload to {where}: {exc.strerror}") from exc
        try:
            with f:
                if size <= PART_BYTES:
                    data = f.read()
                    if len(data) != size:
                        raise StorageError(
                            f"{path}: changed while uploading to {where} "
                            f"({size} bytes, then {len(data)})"
                        )
                    result = obs.put(live, key, data, attributes=attrs, use_multipart=False)
                    sent = size
                    report(size)
                else:

                    def chunks() -> Iterator[bytes]:
                        nonlocal sent
                        while block := f.read(_READ_BYTES):
                            sent += len(block)
                            report(len(block))
                            yield block

                    result = obs.put(
                        live,
                        key,
                        chunks(),
                        attributes=attrs,
                        use_multipart=True,
                        chunk_size=PART_BYTES,
                        max_concurrency=PART_CONCURRENCY,
                    )
                    if sent != size:
                        raise StorageError(
                            f"{path}: changed while uploading to {where} "
                            f"({size} bytes, then {sent})"
                        )
        except BaseException:
            if sent:
                report(-sent)
            raise
        # As a HEAD's, GET's or listing's: the tag without the header's quotes.
        return info_of({"size": size, "e_tag": result.get("e_tag")})

    return store._tries.run(where, once, lambda info: info.size)


def get_attributes(store: ObjectStore, key: str) -> dict[str, str]:
    """The object's attributes and user metadata (one request, no body)."""
    live = store._live(key)

    def once() -> dict[str, str]:
        return dict(obs.get(live, key, options={"head": True}).attributes)

    return store._tries.run(store.where(key), once, lambda _: 0)
