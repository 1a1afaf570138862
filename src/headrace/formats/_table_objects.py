"""A table on object storage: what it reopens from, and its objects opened as parts.

A pickled :class:`~headrace.formats._tables.Table` (a worker's copy) or one
reopened after ``close()`` lists nothing again: :class:`_Remote` holds the
objects as listed, the store options and what opening learned (a
``save_to_disk`` fingerprint, where each IPC object's record batches lie).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from headrace.formats._arrow_remote import ArrowIndex, RemoteArrow
from headrace.formats._object_files import ObjectFiles
from headrace.formats._table_layout import IPC_SUFFIXES
from headrace.formats._table_remote import RemoteParquet

if TYPE_CHECKING:
    from headrace.io import ObjectCache, ObjectInfo

__all__ = ["_Remote", "_open_remote"]


class _Remote(NamedTuple):
    """How a table on object storage reopens: its objects as listed, the store options,
    and what opening learned (a ``save_to_disk`` fingerprint, IPC record batch places)."""

    objects: list[tuple[str, ObjectInfo]]
    store_options: dict[str, Any]
    in_flight: int
    cache: ObjectCache | None = None
    saved_fingerprint: str | None = None
    arrow_index: dict[str, ArrowIndex] | None = None


def _open_remote(remote: _Remote, files: ObjectFiles, pa: Any) -> list[RemoteParquet | RemoteArrow]:
    """Each object as a part, in order: ``.arrow`` (``.feather``, ``.ipc``, ``.arrows``)
    ones as Arrow IPC, the rest as Parquet."""
    arrow = [o for o in remote.objects if o[0].endswith(IPC_SUFFIXES)]
    parquet = [o for o in remote.objects if not o[0].endswith(IPC_SUFFIXES)]
    opened: dict[str, RemoteParquet | RemoteArrow] = {}
    if arrow:
        opened.update(
            (p.path, p) for p in RemoteArrow.open_all(arrow, files, pa, remote.arrow_index)
        )
    if parquet:
        opened.update((p.path, p) for p in RemoteParquet.open_all(parquet, files, pa))
    return [opened[url] for url, _ in remote.objects]
