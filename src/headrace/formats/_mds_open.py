"""Opening an MDS dataset: ``index.json`` read and parsed, its shards listed (local
``stat`` or one LIST of the prefix) and their sizes checked against the index."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Container
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from headrace.errors import ConfigError, FormatError, ObjectNotFoundError
from headrace.formats._file_list import FileList, Listing, columns, is_object_url, list_files
from headrace.formats._mds_index import MDSIndex, MDSShard, parse_index
from headrace.formats._object_files import check_store_options
from headrace.io._file import open_error

if TYPE_CHECKING:
    from headrace.io import ObjectCache

__all__ = ["INDEX", "open_mds", "read_from", "shard_files"]

INDEX = "index.json"


def open_mds(
    root: str,
    where: str,
    store_options: dict[str, Any] | None,
    remote: bool,
    carried: tuple[MDSIndex, Listing] | None,
    cache: ObjectCache | None = None,
) -> tuple[MDSIndex, FileList]:
    """The parsed index and the shards' listing (sizes and versions); ``carried``: those
    a parent read, re-opened as they were. ``cache``: where the listing's reads of an
    object store's shards are kept (``cache_dir``)."""
    if root.rstrip("/").rsplit("/", 1)[-1] == INDEX:
        raise ConfigError(
            f"{root}: MDSSource takes the folder or prefix that holds {INDEX} (and the "
            f"shards), not the file: pass {root.rstrip('/')[: -len(INDEX)].rstrip('/') or '.'!r}"
        )
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
                f"wrote (index.json and its shards){_splits_in(root)}"
            ) from exc
        except OSError as exc:
            raise open_error(where, exc) from exc
        index = parse_index(data, where)
        _refuse_repeats(index, where)
        stored = _stored(root, index)
        index = read_from(index, stored or ())
        if stored is not None:
            _refuse_missing(root, index, stored)
        return index, list_files([os.path.join(root, s.basename) for s in index.shards])
    from headrace.formats._file_list_objects import remote_list
    from headrace.io import ObjectStore

    options = check_store_options(store_options, remote=True, where=root)
    store = ObjectStore(root, **options)
    try:
        if carried is not None:
            index, listing = carried
            return index, remote_list(store, listing, options, cache)
        try:
            raw = store.get(INDEX)
        except ObjectNotFoundError as exc:
            raise ObjectNotFoundError(
                f"{where}: no such object; MDSSource takes the prefix Streaming's MDSWriter "
                "wrote (index.json and its shards), or a prefix of splits with split= "
                "('train' reads train/index.json)"
            ) from exc
        index = parse_index(raw, where)
        _refuse_repeats(index, where)
        listed = dict(store.list_info())
        index = read_from(index, listed)
        _refuse_missing(root, index, listed)
        rows = [
            (s.basename, listed[s.basename].size, listed[s.basename].etag) for s in index.shards
        ]
        return index, remote_list(store, columns(rows), options, cache)
    except BaseException:
        store.close()
        raise


def _splits_in(root: str) -> str:
    """What to say of a local folder without an index: the splits it holds (subfolders
    with an index of their own, which Streaming reads with ``split=``), if any."""
    try:
        names = sorted(e.name for e in os.scandir(root) if e.is_dir())
    except OSError:
        return ""
    splits = [n for n in names if os.path.isfile(os.path.join(root, n, INDEX))]
    if not splits:
        return ""
    listed = ", ".join(repr(n) for n in splits[:8]) + (", ..." if len(splits) > 8 else "")
    return f"; it holds the splits {listed}: give split={splits[0]!r} (or that folder)"


def read_from(index: MDSIndex, stored: Container[str]) -> MDSIndex:
    """``index`` as read: a compressed shard whose decompressed file (``raw_data``'s) is
    ``stored`` is read from that file, by ranges, as an uncompressed shard. Streaming's
    local cache holds such files (a shard downloaded is decompressed beside the index
    that names it compressed; with ``keep_zip=False``, its default, the compressed file
    is then deleted). The index's entry is kept (``listed``): the dataset is the same
    whichever file a shard is read from."""
    shards = tuple(
        MDSShard(s.raw_name, s.samples, s.raw_bytes, listed=s)
        if s.codec and s.raw_name is not None and s.raw_name in stored
        else s
        for s in index.shards
    )
    return replace(index, shards=shards)


def _stored(root: str, index: MDSIndex) -> set[str] | None:
    """The files stored in the folders under ``root`` that would hold the index's shards
    (compressed or decompressed): one READDIR a folder, not a stat a shard. ``None``
    where a folder cannot be listed (no read permission: its files may still be opened
    by name; the shards named are then read as stored, compressed where so)."""
    names = [s.basename for s in index.shards]
    names += [s.raw_name for s in index.shards if s.raw_name is not None]
    stored: set[str] = set()
    for folder in sorted({os.path.dirname(n) for n in names}):
        try:
            entries = os.listdir(os.path.join(root, folder))
        except FileNotFoundError:
            continue  # no shard there: each is missing
        except OSError:
            return None
        stored.update(os.path.join(folder, e) if folder else e for e in entries)
    return stored


def _refuse_missing(root: str, index: MDSIndex, stored: Container[str]) -> None:
    """Refuse an index that lists shards not ``stored``, naming them: a compressed one by
    both its files (a Streaming cache folder holds the shards it has downloaded)."""
    missing = [s for s in index.shards if s.basename not in stored]
    if not missing:
        return
    named = [
        f"{s.basename} (or decompressed, {s.raw_name})" if s.codec and s.raw_name else s.basename
        for s in missing[:3]
    ]
    why = (
        "deleted after the index was written, or never uploaded: upload them, or write the "
        "dataset again"
        if is_object_url(root)
        else "a Streaming cache folder holds only the shards it has downloaded: read the "
        "remote dataset, or let Streaming fetch every shard"
    )
    raise ObjectNotFoundError(
        f"{root}: index.json lists {len(missing)} shard(s) not stored there: "
        f"{', '.join(named)}{', ...' if len(missing) > 3 else ''} ({why})"
    )


def _refuse_repeats(index: MDSIndex, where: str) -> None:
    names = Counter(s.basename for s in index.shards)
    if len(names) != len(index.shards):
        # (Counted once: a count a name took minutes for an index of 30,000 shards twice.)
        twice = sorted(n for n, k in names.items() if k > 1)
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
