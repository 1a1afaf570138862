"""Opening an MDS dataset: ``index.json`` read and parsed, its shards listed (local
``stat`` or one LIST of the prefix) and their sizes checked against the index."""

from __future__ import annotations

import os
from typing import Any

from headrace.errors import FormatError, ObjectNotFoundError, StorageError
from headrace.formats._file_list import FileList, Listing, columns, list_files
from headrace.formats._mds_index import MDSIndex, parse_index
from headrace.formats._object_files import check_store_options

__all__ = ["INDEX", "open_mds", "shard_files"]

INDEX = "index.json"


def open_mds(
    root: str,
    where: str,
    store_options: dict[str, Any] | None,
    remote: bool,
    carried: tuple[MDSIndex, Listing] | None,
) -> tuple[MDSIndex, FileList]:
    """The parsed index and the shards' listing (sizes and versions); ``carried``: those
    a parent read, re-opened as they were."""
    if not remote:
        check_store_options(store_options, remote=False, paths=[root])
        if carried is not None:
            index, listing = carried
            return index, list_files(listing[0], listing=listing)
        try:
            with open(where, "rb") as f:
                data = f.read()
        except FileNotFoundError as exc:
            raise ObjectNotFoundError(
                f"{where}: no such file; MDSSource takes the folder Streaming's MDSWriter "
                "wrote (index.json and its shards)"
            ) from exc
        except OSError as exc:
            raise StorageError(f"{where}: {exc.strerror or exc}") from exc
        index = parse_index(data, where)
        _refuse_repeats(index, where)
        return index, list_files([os.path.join(root, s.basename) for s in index.shards])
    from headrace.formats._file_list_objects import remote_list
    from headrace.io import ObjectStore

    options = check_store_options(store_options, remote=True, where=root)
    store = ObjectStore(root, **options)
    try:
        if carried is not None:
            index, listing = carried
            return index, remote_list(store, listing, options, None)
        try:
            raw = store.get(INDEX)
        except ObjectNotFoundError as exc:
            raise ObjectNotFoundError(
                f"{where}: no such object; MDSSource takes the prefix Streaming's MDSWriter "
                "wrote (index.json and its shards)"
            ) from exc
        index = parse_index(raw, where)
        _refuse_repeats(index, where)
        listed = dict(store.list_info())
        missing = [s.basename for s in index.shards if s.basename not in listed]
        if missing:
            raise ObjectNotFoundError(
                f"{root}: index.json lists {len(missing)} shard(s) not stored there: {missing[:3]}"
            )
        rows = [
            (s.basename, listed[s.basename].size, listed[s.basename].etag) for s in index.shards
        ]
        return index, remote_list(store, columns(rows), options, None)
    except BaseException:
        store.close()
        raise


def _refuse_repeats(index: MDSIndex, where: str) -> None:
    names = [s.basename for s in index.shards]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise FormatError(f"{where}: shard file(s) listed twice: {twice[:3]}")


def shard_files(files: FileList, index: MDSIndex, root: str) -> list[int]:
    """Each shard's number in ``files``, its listed size checked against the index."""
    pos = {k: i for i, k in enumerate(files.keys)}
    out = []
    for s in index.shards:
        f = pos[s.basename if files.remote else os.path.join(root, s.basename)]
        if s.bytes is not None and files.sizes[f] != s.bytes:
            raise FormatError(
                f"{files.name(f)}: {files.sizes[f]} bytes, index.json says {s.bytes} "
                f"({'truncated' if files.sizes[f] < s.bytes else 'longer'}, or written "
                "after the index was)"
            )
        out.append(f)
    return out
