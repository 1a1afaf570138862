"""Which files a :class:`~headrace.formats._tables.Table` opens: a path, a list, a
glob, a ``save_to_disk`` folder or a Hugging Face cache folder, resolved to files
in order; and a ``save_to_disk`` folder's fingerprint."""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import stat
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

from headrace._messages import refuse_a_set
from headrace.errors import (
    ConfigError,
    FormatError,
    ObjectNotFoundError,
)
from headrace.formats._arrow_local import map_file
from headrace.formats._file_list import refuse_repeats, special_skipped
from headrace.formats._file_walk import (
    kind_of,
    refuse_empty,
    refuse_glob_cycles,
    regular_stats,
    stat_each,
)
from headrace.formats._table_layout import (
    _TABLE_SUFFIXES,
    DELTA_LOG,
    folder_files,
    is_split_name,
    refuse_delta,
    state_files,
    state_fingerprint,
)
from headrace.formats._table_part import _ARROW_FILE_MAGIC, _pa
from headrace.formats._url_glob import ESCAPE_HINT, glob_root, local_pattern
from headrace.io._file import missing_hint, slash_hint

log = logging.getLogger("headrace.formats")

__all__ = [
    "_path_list",
    "_resolve",
    "dataset_columns",
    "saved_fingerprint",
    "table_fingerprint",
]

# What a datasets MemoryMappedTable may replay over its file in memory while it still
# shows the file's rows and columns under the file's names: feature metadata, a
# rechunking, and column picks (honoured: the Dataset's columns are the ones read).
_SAME_DATA = frozenset(
    {"combine_chunks", "drop", "remove_column", "replace_schema_metadata", "select"}
)
# How the replays that change what a file's bytes mean are told to the user.
_REPLAYED = {
    "rename_columns": "renames columns (rename_column, rename_columns)",
    "flatten": "flattens struct columns (flatten)",
    "cast": "casts columns",
    "slice": "shows a slice of its files' rows (select, shard, take, skip)",
    "filter": "filters rows",
    "add_column": "adds columns",
    "append_column": "adds columns",
    "set_column": "replaces columns",
}


def _path_list(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
) -> list[str | os.PathLike[str]]:
    """``path`` as a list of paths: a ``datasets.Dataset`` as its files, when they hold
    exactly its rows (:func:`_dataset_files`); anything else (a dict) refused.

    A ``datasets`` object is never iterated: iterating a ``Dataset`` decodes its
    rows, and a ``DatasetDict`` yields split names, not files.
    """
    if isinstance(path, (str, os.PathLike)):
        return [path]
    kind = f"{type(path).__module__}.{type(path).__name__}"
    if kind.startswith("datasets.") and type(path).__name__ == "Dataset":
        return list(_dataset_files(path))
    if kind.startswith("datasets."):
        raise ConfigError(
            f"got a {kind} object; headrace reads a Dataset's files: pass one split's "
            "Dataset (ds['train']) or a folder written by ds.save_to_disk(folder)"
        )
    refuse_a_set("path", path, "files")
    if isinstance(path, (Mapping, bytes)) or not isinstance(path, Iterable):
        raise ConfigError(
            f"expected a path, a glob or a list of paths; got a {kind} ({path!r:.80})"
        )
    out: list[str | os.PathLike[str]] = []
    for p in path:
        if not isinstance(p, (str, os.PathLike)):
            raise ConfigError(
                f"expected a list of paths; item {len(out)} is a {type(p).__name__} ({p!r:.80})"
            )
        out.append(p)
    refuse_empty(out, "Table.open")
    refuse_repeats([os.fspath(p) for p in out], "rows")
    return out


def _dataset_files(ds: Any) -> list[str]:
    """The Arrow files under a ``datasets.Dataset``, if they hold exactly the rows it shows.

    A ``Dataset`` made by ``load_dataset``/``map``/``load_from_disk`` reads memory-mapped
    cache files; after a ``shuffle``, ``select``, ``filter`` or ``sort`` it shows them
    through an indices mapping, and after a contiguous ``select``/``shard``/``take`` a
    slice of them, while the files hold the rows before. Those are refused, as is a
    Dataset held in memory (no files): headrace would read other rows.
    """
    fix = "ds.save_to_disk(folder) writes the rows as it shows them: pass that folder"
    if getattr(ds, "_indices", None) is not None:
        raise ConfigError(
            f"this Dataset ({len(ds)} rows) shows its files' rows through an indices mapping "
            "(after a shuffle, select, filter or sort): pass ds.flatten_indices() (a Dataset "
            "in files of the rows as it shows them), or write them with "
            "ds.flatten_indices().save_to_disk(path) and pass that path"
        )
    files = [str(c["filename"]) for c in getattr(ds, "cache_files", ())]
    if not files:
        raise ConfigError(f"this Dataset ({len(ds)} rows) is held in memory, not in files: {fix}")
    pa = _pa()
    stored = 0
    schema = None
    for f in files:
        size = os.path.getsize(f)
        if size == 0:  # nothing to map: the open that follows names it
            continue
        mm, whole = map_file(pa, f, size)
        mm.close()
        # Headers only, zero-copy from the map (reads through ``mm`` would read the bodies).
        src = pa.BufferReader(whole)
        if whole.slice(0, 6).to_pybytes() == _ARROW_FILE_MAGIC:
            reader = pa.ipc.open_file(src)
            stored += reader.read_all().num_rows
        else:
            reader = pa.ipc.open_stream(src)
            stored += sum(b.num_rows for b in reader)
        schema = schema or reader.schema
    if stored != len(ds):
        raise ConfigError(
            f"this Dataset shows {len(ds)} rows of its files' {stored} ({', '.join(files)}): "
            f"a select, shard, take or skip of them; {fix}"
        )
    _refuse_memory_transforms(ds, files, schema, fix)
    return files


def _refuse_memory_transforms(ds: Any, files: list[str], schema: Any, fix: str) -> None:
    """Refuse a Dataset whose columns are not its files' columns under the same names.

    ``datasets`` replays column transforms over a memory-mapped file in memory
    (``MemoryMappedTable.replays``); the file keeps its own names and types. A rename
    of two columns into each other's names even leaves the same names and types, so
    the replays are looked at first, then every column it shows against the files'.
    """
    table = getattr(ds, "data", None)
    blocks = getattr(table, "blocks", None)  # a ConcatenationTable's, rows of blocks
    for block in [b for row in blocks for b in row] if blocks is not None else [table]:
        for replay in getattr(block, "replays", None) or ():
            op = str(replay[0])
            if op not in _SAME_DATA:
                what = _REPLAYED.get(op, f"applies {op}")
                raise ConfigError(
                    f"this Dataset {what} in memory, over files that hold them as they were "
                    f"({', '.join(files)}); headrace reads the files: {fix}"
                )
    shown = getattr(table, "schema", None)
    if shown is None or schema is None:
        return
    gone = [n for n in shown.names if n not in schema.names]
    if gone:
        raise ConfigError(
            f"this Dataset shows column(s) {gone}, which are not in its files "
            f"({', '.join(files)}: {schema.names}; made in memory, e.g. add_column): {fix}"
        )
    for field in shown:
        held = schema.field(field.name).type
        if not field.type.equals(held):
            raise ConfigError(
                f"this Dataset shows column {field.name!r} as {field.type}; its files "
                f"({', '.join(files)}) hold {held}: {fix}"
            )


def dataset_columns(path: object, columns: Sequence[str] | None) -> list[str] | None:
    """``columns`` of a ``datasets.Dataset`` ``path``: by default the columns it shows
    (its files may hold more: ``remove_columns`` and ``select_columns`` drop them in
    memory); others refused. ``columns`` as given when ``path`` is not a Dataset."""
    kind = f"{type(path).__module__}.{type(path).__name__}"
    if not (kind.startswith("datasets.") and type(path).__name__ == "Dataset"):
        return None if columns is None else list(columns)
    shown = list(getattr(path, "column_names", None) or [])
    if columns is None:
        return shown
    gone = [c for c in columns if c not in shown]
    if gone:
        raise ConfigError(f"this Dataset has no column(s) {gone}; it shows {shown}")
    return list(columns)


def saved_fingerprint(root: str) -> str | None:
    """The ``_fingerprint`` ``datasets`` wrote into ``root/state.json`` (``None``: none);
    see :func:`~headrace.formats._table_layout.state_fingerprint`."""
    try:
        with open(os.path.join(root, "state.json"), encoding="utf-8") as f:
            return state_fingerprint(f.read())
    except (OSError, ValueError):
        return None


def _resolve(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
) -> tuple[str, list[str]]:
    """The dataset root (for names in messages) and its files in order."""
    refuse_empty([path] if isinstance(path, (str, os.PathLike)) else [], "Table.open")
    if not isinstance(path, (str, os.PathLike)):
        # A list may hold glob patterns, as Hugging Face's data_files does: each one's
        # matches in its place (until 2026-12-05 taken for a path: "no such file").
        files: list[str] = []
        matched: set[str] = set()
        for p in _path_list(path):
            text = os.fspath(p)
            pattern = local_pattern(text)
            if pattern is not None:
                found = _matches(text, pattern)
                files += found
                matched.update(found)
            else:
                files.append(text)
        if not files:
            raise ConfigError("Table.open got an empty list of files")
        refuse_repeats(files, "rows")  # (patterns that overlap)
        files = _regular(files, matched)
        if not files:  # patterns that match folders only
            raise FormatError(f"{path}: no files match{ESCAPE_HINT}")
        if matched:
            _refuse_delta_above([f for f in files if f in matched])
        return os.path.commonpath([os.path.abspath(f) for f in files]), files
    root = os.fspath(path)
    pattern = local_pattern(root)
    if pattern is not None:
        # The folder above the first wildcard, as on object storage (_url_glob): the
        # files' names in the fingerprint are relative to it, so a state saved on
        # local files resumes on their copy in a bucket.
        found = _matches(root, pattern)
        files = _regular(found, set(found))
        if not files:  # folders only
            raise FormatError(f"{root}: no files match{ESCAPE_HINT}")
        _refuse_delta_above(files)
        return glob_root(root, os.sep), files
    if os.path.lexists(root) and not os.path.isdir(root):  # (a dangling link: named)
        return os.path.dirname(root), _regular([root])
    if not os.path.isdir(root):
        raise ObjectNotFoundError(
            f"{root}: no such file or directory{missing_hint(root)}{slash_hint(root)}"
        )
    if os.path.exists(os.path.join(root, "dataset_dict.json")):
        splits = sorted(e.name for e in os.scandir(root) if e.is_dir())
        raise ConfigError(
            f"{root} is a DatasetDict; open one split: {[os.path.join(root, s) for s in splits]}"
        )
    state = os.path.join(root, "state.json")
    if os.path.exists(state):
        try:
            with open(state, encoding="utf-8") as f:
                text = f.read()
        except (OSError, ValueError) as exc:  # unreadable, or not UTF-8
            raise FormatError(f"{state}: not a save_to_disk state file ({exc!r})") from exc
        files = [os.path.join(root, n) for n in state_files(root, state, text)]
        missing = [f for f in files if not os.path.lexists(f)]
        if missing:
            raise FormatError(
                f"{state} lists data files that do not exist: {missing}: the folder is "
                "incomplete; copy it again, or save it again with ds.save_to_disk(folder)"
            )
        return root, _regular(files)
    if os.path.isdir(os.path.join(root, DELTA_LOG)):
        refuse_delta(root)
    nested = _nested_tables(root)
    splits = [n for n in nested if is_split_name(n)]
    if len(splits) > 1:
        raise ConfigError(
            f"{root} has splits in subfolders ({', '.join(nested)}); reading them as one "
            f"table would mix the splits: open one, e.g. {os.path.join(root, splits[0])!r}"
        )
    if nested:
        skipped = (
            f"{root} has table files in subfolders ({', '.join(nested[:3])}"
            f"{', ...' if len(nested) > 3 else ''}), which opening the folder would skip"
        )
        if len(nested) == 1:
            # A Hub repo's layout (data/train-00000-of-00002.parquet, data/test-...):
            # the glob below would mix its splits, so its own refusal comes first.
            sub = os.path.join(root, nested[0])
            try:
                folder_files(sub, os.listdir(sub), os.sep)
            except ConfigError as exc:
                raise ConfigError(f"{skipped}: {exc}") from None
            except FormatError:
                pass  # no tables right in it (they lie deeper): the glob below
        every = os.path.join(root, "**", "*.parquet")
        if len(nested) > 1 and not all("=" in n for n in nested):
            # Not hive partitions (year=2024/): maybe a repo's configs, which the glob
            # would read as one table without a word.
            raise ConfigError(
                f"{skipped}; if they are separate datasets (configs, languages): open one, "
                f"e.g. {os.path.join(root, nested[0])!r}; if they are parts of one table, "
                f"pass a glob such as {every!r} or a list of files"
            )
        raise ConfigError(
            f"{skipped}; pass a glob such as {every!r} (values in partition folder names "
            "are not read as columns) or a list of files"
        )
    return root, folder_files(root, _regular_names(root), os.sep)


def _matches(given: str, pattern: str) -> list[str]:
    """What ``pattern`` (``given``, escaped by :func:`local_pattern`) matches, sorted
    (folders too: :func:`_regular` leaves them out); one that matches nothing is
    refused, naming ``given``."""
    found = sorted(glob.glob(pattern, recursive=True))
    if not found:
        raise FormatError(f"{given}: no files match{ESCAPE_HINT}")
    if "**" in pattern:  # through a link to a folder above it: each file many times
        refuse_glob_cycles(given, found)
    return found


def _regular(files: list[str], matched: Container[str] = ()) -> list[str]:
    """``files``, each checked as FileSource checks a listed file: a dangling symbolic
    link is refused naming its target, a FIFO, socket or device by name (opening a FIFO
    waited for a writer for ever; a glob left both out without a word); folders among
    ``matched`` (a glob's matches) left out. Stats many at a time on a slow mount
    (:func:`regular_stats`): a glob of 1,000 files at 1 ms a stat took 3.05 s to open,
    0.79-0.92 s so."""
    return [f for f, _ in regular_stats(files, matched)]


def _regular_names(root: str) -> list[str]:
    """The names in folder ``root``, less table files that are not regular files (a FIFO,
    socket or device named ``x.parquet``): left out, counted in a warning, as a
    FileSource's folder leaves them out (``special_skipped``). A dangling link named
    like a table file is refused, naming its target, as FileSource's walk refuses it.
    Stats many at a time on a slow mount (:func:`stat_each`)."""
    names = os.listdir(root)
    tables = [n for n in names if n.endswith(_TABLE_SUFFIXES) and not n.startswith(".")]
    special = {
        n: f"{n!r}: {kind_of(st.st_mode)}"
        for n, st in zip(tables, stat_each(tables, root), strict=True)
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode)
    }
    if special:
        names = [n for n in names if n not in special]
        log.warning("%s: %s", root, special_skipped(len(special), min(special.values())))
    return names


def _refuse_delta_above(files: Sequence[str]) -> None:
    """Refuse files a glob matched in a Delta Lake table: in its folder, or below it (its
    partition folders, its log's checkpoints). A stat per folder above them."""
    seen: set[str] = set()
    for f in files:
        folder = os.path.dirname(os.path.abspath(f))
        while folder not in seen:
            seen.add(folder)
            if os.path.basename(folder) == DELTA_LOG or os.path.isdir(
                os.path.join(folder, DELTA_LOG)
            ):
                refuse_delta(folder.removesuffix(os.sep + DELTA_LOG))
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent


def _nested_tables(root: str) -> list[str]:
    """Subfolders of ``root`` with .arrow or .parquet files somewhere under them."""
    found = []
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if not entry.is_dir() or entry.name.startswith("."):  # .ipynb_checkpoints, .git
            continue
        for _, _, files in os.walk(entry.path):
            if any(f.endswith(_TABLE_SUFFIXES) for f in files):
                found.append(entry.name)
                break
    return found


def table_fingerprint(root: str, parts: Sequence[Any], schema: Any, *, remote: bool) -> str:
    """SHA-256 of each file's path (relative to ``root``; an object's URL past it) and
    size, in order, and of the columns' schema."""
    h = hashlib.sha256()
    for p in parts:
        if remote:
            rel = p.path.removeprefix(root + "/")
        else:
            rel = os.path.relpath(os.path.abspath(p.path), os.path.abspath(root))
        h.update(f"{rel}\0{p.size}\0".encode())
    h.update(str(schema).encode())
    return h.hexdigest()
