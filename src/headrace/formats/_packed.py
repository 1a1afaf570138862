"""A column of token lists in Arrow files as token streams: packing without a pre-pass.

A tokenized Hugging Face dataset (``save_to_disk``, or the Arrow files of its
cache) keeps a ``list<int32>`` column such as ``input_ids`` as one values
buffer per record batch, stored in the file as is (uncompressed IPC). The
concatenation of those buffers, in row order, *is* a token stream with every
row a document: :func:`table_token_files` finds their byte ranges from the
record batch headers (no values are read) and returns one
:class:`~headrace.formats.TokenFile` over every shard in order, which
:class:`~headrace.formats.TokenSource` samples like any token file. Samples
are ``L + 1`` consecutive tokens of the stream, so they run across document,
record batch and shard boundaries, as packed pretraining sequences do; with
``positions="documents"`` each batch carries ``position_ids`` that restart at
every row's first token. Plans are closed-form as for token files: resuming at
step ``10**6`` reads nothing before it.

Reads go through :class:`SegmentedFile`: a window's 4 MiB block is one
positional read per byte range it covers (a record batch of 1,000 rows of 300
int32 tokens is 1.2 MB, so ~4 reads a block); windows are buffered, not
mapped, since the ranges are not one run of the file.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._messages import RECOPY, first_failed
from headrace.errors import (
    ConfigError,
    DataError,
    FormatError,
    ObjectNotFoundError,
    ReadEOFError,
    StorageError,
)
from headrace.formats._arrow_numpy import valid_rows
from headrace.formats._file_list import is_object_url
from headrace.formats._object_files import (
    DEFAULT_IN_FLIGHT,
    ObjectFiles,
    RemoteFile,
    check_in_flight,
    check_store_options,
    failures_of,
    joined,
)
from headrace.formats._table_schema import numeric_dtype
from headrace.formats._tokens import LLMC_HEAD, TokenFile
from headrace.io import LocalFile, deep_io_pool
from headrace.io._open_files import MAX_IDLE_FILES, gone_error

__all__ = [
    "MAX_OPEN_MEMBERS",
    "PACKED_DTYPES",
    "RemoteSegments",
    "SegmentedFile",
    "table_token_files",
]

#: The most members (shards) a :class:`SegmentedFile` holds open: a window's reads go
#: through its members in order, so the few it is reading are the most recently read.
MAX_OPEN_MEMBERS = MAX_IDLE_FILES

#: Value types of a token-list column that can be read as a token stream.
PACKED_DTYPES = (
    np.dtype(np.uint16),
    np.dtype(np.uint32),
    np.dtype(np.int32),
    np.dtype(np.int64),
)

#: Why a Parquet file (local or an object) cannot be packed.
_NOT_PARQUET = (
    "a Parquet file's pages are encoded and compressed, so its token lists are not byte "
    "ranges of the file: pack from an Arrow copy (datasets' save_to_disk) or use "
    "TableSource, which pads rows instead"
)

#: Columns of an SFT dataset that say which targets count (``labels``, -100 on prompt
#: tokens): packing reads one column unless given ``labels=``, so a table holding one of
#: these unread is warned of.
_LABEL_COLUMNS = ("labels", "loss_mask")


def _warn_unread_labels(
    path: str, names: Sequence[str], column: str, stacklevel: int = 3, labels: str | None = None
) -> None:
    """Warn that ``path``'s label column (:data:`_LABEL_COLUMNS`) is not read.

    An SFT dataset keeps ``input_ids`` and ``labels`` (-100 on the prompt). Packing
    without ``labels=`` reads ``column`` alone and ``y`` is its next id everywhere:
    without a word, the labels were silently dropped and the loss taken on the prompts
    too.
    """
    unread = [c for c in _LABEL_COLUMNS if c in names and c not in (column, labels)]
    if unread:
        fix = "For SFT with masked prompts use TableSource (pads each row, keeps its labels)"
        if unread[0] == "labels":  # targets, as Hugging Face's; a loss_mask is not
            fix = (
                "To read it as the targets pass table_token_files(..., labels='labels') "
                "and TokenSource(..., targets='documents') (no target across documents), "
                "or use TableSource (pads each row, keeps its labels)"
            )
        warnings.warn(
            f"{path}: column {unread[0]!r} is not read: packing reads {column!r} only, so "
            f"y is the next id of {column!r} at every position, prompt tokens (labelled "
            f"-100) included. {fix}; for a pretraining table that carries labels, filter "
            "this warning (docs/rows.md, packed sequences)",
            UserWarning,
            stacklevel=stacklevel,  # table_token_files' caller
        )


def table_token_files(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    column: str = "input_ids",
    *,
    labels: str | None = None,
    store_options: Mapping[str, Any] | None = None,
    in_flight: int = DEFAULT_IN_FLIGHT,
) -> list[TokenFile]:
    """The rows of ``column`` in every Arrow file of ``path``, concatenated: one stream.

    ``path`` is what :class:`~headrace.formats.Table` opens: a ``save_to_disk``
    folder (its ``state.json`` orders the shards), a folder of ``.arrow`` files,
    one file, a glob or a list. The shards make one stream in that order, as
    ``ds["input_ids"]`` is one sequence of rows: samples run across shards, an
    empty or short shard is just fewer tokens, and only the dataset's last ``L``
    tokens can go unsampled. Returned as a list of one :class:`TokenFile`, for
    :class:`~headrace.formats.TokenSource`. ``column`` must be a ``list``,
    ``large_list`` or ``fixed_size_list`` (datasets' ``Sequence(Value(...),
    length=N)``: a document a row, each ``N`` tokens) of uint16, uint32, int32 or
    int64 without nulls. Only record batch headers are read (the values stay unread
    pages). Parquet
    (encoded, compressed pages) and compressed Arrow IPC are refused: their tokens
    are not byte ranges of the file. Only ``column`` is read: ``y`` is its next id
    everywhere, so an SFT table's ``labels`` (-100 on prompts) or ``loss_mask`` column
    is not applied, and is warned of, unless read with ``labels``.

    ``labels``: a column of targets beside ``column`` (Hugging Face SFT's ``labels``:
    -100 on prompt tokens, else the ids, unshifted), read as a second stream of the
    same rows (``TokenFile.labels``): ``TokenSource`` then gives ``y[p]`` the label of
    the token after ``x[p]`` (``labels[s + p + 1]``, the model's shift). Every row of
    it must hold as many values as ``column``'s: another length is refused at open,
    naming the file, record batch and row. Its values are of the same types as ids
    (int64 as ``datasets`` writes labels; -100 needs a signed one).

    On object storage (a ``save_to_disk`` prefix, ``.arrow`` objects, a glob or a
    list of URLs; ``store_options`` go to :class:`~headrace.io.ObjectStore`):
    opening walks each object's record batch headers and fetches each batch's
    row offsets of ``column`` (4 or 8 bytes a row, all in flight); the
    ``TokenSource`` given the result (and the same ``store_options``) fills its
    windows' blocks by ranged GETs of the values. Same tokens, same batches and
    the same fingerprint as a local copy.
    """
    from headrace.formats._table_part import _pa
    from headrace.formats._table_paths import (
        _path_list,
        _resolve,
        dataset_columns,
    )

    if labels is not None and (not isinstance(labels, str) or labels == column):
        raise ConfigError(
            f"labels must name a column of targets other than {column!r}, e.g. 'labels' "
            f"(got labels={labels!r})"
        )
    paths = _path_list(path)
    shown = dataset_columns(path, None)
    for c in (column, labels):
        if shown is not None and c is not None and c not in shown:
            raise ConfigError(f"this Dataset has no column {c!r}; it shows {shown}")
    remote = [os.fspath(p) for p in paths if is_object_url(os.fspath(p))]
    check_store_options(store_options, remote=bool(remote))
    if remote:
        if len(remote) != len(paths):
            raise ConfigError("a dataset's files are all local paths or all object URLs (got both)")
        where = os.fspath(path) if isinstance(path, (str, os.PathLike)) else remote
        return [_remote_stream(where, column, dict(store_options or {}), in_flight, labels)]
    root, files = _resolve(path if isinstance(path, (str, os.PathLike)) else paths)
    pa = _pa()
    streams = (
        _column_streams(pa, files, column)
        if labels is None
        else _column_streams(pa, files, column, labels)
    )
    _warn_unread_labels(files[0], streams[0][0][5], column, labels=labels)
    ids = _local_file(root, files, column, [s for s, _ in streams])
    if labels is None:
        return [ids]
    said = _local_file(root, files, labels, [s for _, s in streams if s is not None])
    return [dataclasses.replace(ids, labels=said)]


def _local_file(root: str, files: list[str], column: str, streams: list[_Stream]) -> TokenFile:
    """The :class:`TokenFile` of ``column``'s rows in local ``files``, one stream."""
    from headrace.formats._table_paths import saved_fingerprint

    dtypes: set[np.dtype[Any]] = set()
    segments, bounds = [], []
    tokens = 0
    versions: list[tuple[int, str]] = []
    first_rows: list[int] = []  # the dataset row each shard's rows start at
    rows = 0
    for m, (f, (dtype, seg, starts, n, stamp, _)) in enumerate(zip(files, streams, strict=True)):
        if dtypes and dtype not in dtypes:
            raise ConfigError(
                f"{f}: column {column!r} holds {dtype} ids, the shards before it "
                f"{dtypes.pop()}: one stream needs one dtype"
            )
        dtypes.add(dtype)
        segments.append(np.column_stack([np.full(len(seg), m), seg]))
        first_rows.append(rows)
        rows += len(starts)
        bounds.append(tokens + starts)
        tokens += n
        versions.append((stamp[2], _local_version(stamp)))
    if tokens == 0:
        raise DataError(f"{root}: column {column!r} holds no tokens in {len(files)} file(s)")
    # An empty row starts where the next one does: a document of no tokens, harmless.
    return TokenFile(
        path=files[0] if len(files) == 1 else root,
        dtype=dtypes.pop(),
        num_tokens=tokens,
        format=f"arrow:{column}",
        members=tuple(files),
        segments=np.concatenate(segments).astype(np.int64).reshape(-1, 3),
        bounds=np.concatenate([*bounds, [tokens]]).astype(np.int64),
        dataset=saved_fingerprint(root),
        # The byte ranges are of these versions of the shards: read from no other.
        member_stamps=tuple(versions),
        member_rows=tuple(first_rows),
    )


def _local_version(stamp: tuple[int, int, int, int]) -> str:
    """A local shard's version tag, from its (device, inode, size, mtime) stamp."""
    return f"{stamp[0]}:{stamp[1]}:{stamp[3]}"


_Stream = tuple[
    np.dtype[Any],
    NDArray[np.int64],
    NDArray[np.int64],
    int,
    tuple[int, int, int, int],
    tuple[str, ...],
]


def _column_streams(
    pa: Any, files: list[str], column: str, labels: str | None = None
) -> list[tuple[_Stream, _Stream | None]]:
    """:func:`_column_stream` of every file, side by side on the deep I/O pool: each
    is a walk of round trips (the file's record batch headers, then its offsets),
    which one file after another added up on a network mount. Every file is done
    before the first error (by file order) is raised, the others named
    (:func:`~headrace._messages.first_failed`), as a table's and object storage's are."""
    futures = [deep_io_pool().submit(_column_stream, pa, f, column, labels) for f in files]
    failed = [(f, e) for f, e in zip(files, failures_of(futures), strict=True) if e is not None]
    if failed:
        raise first_failed(failed, "of the table failed to open too")
    return [f.result() for f in futures]


def _column_stream(
    pa: Any, path: str, column: str, labels: str | None = None
) -> tuple[_Stream, _Stream | None]:
    """(dtype, byte ranges (offset, length), row starts in tokens, tokens, the file's
    (device, inode, size, mtime) stamp, its column names) of one file, for ``column``
    and for ``labels`` (``None`` without), whose rows are checked to be as long."""
    from headrace.formats._table_part import _Part
    from headrace.formats._table_schema import refuse_indices_mapping

    part = _Part(path, pa)
    try:
        refuse_indices_mapping(pa, path, part.schema)
        if part.parquet:
            raise ConfigError(f"{path}: {_NOT_PARQUET}")
        dtype, layout = _token_column(pa, path, part.schema, column)
        segments, starts, n = _segments(part, column, dtype, layout)
        said: _Stream | None = None
        if labels is not None:
            ltype, llayout = _token_column(pa, path, part.schema, labels)
            lsegs, lstarts, ln = _segments(part, labels, ltype, llayout)
            rows = [b.num_rows for b in part.batches]
            check_aligned(path, (column, starts, n), (labels, lstarts, ln), rows)
            said = (ltype, lsegs, lstarts, ln, part.stamp, tuple(part.schema.names))
    finally:
        part.close()
    return (dtype, segments, starts, n, part.stamp, tuple(part.schema.names)), said


def check_aligned(
    path: str,
    ids: tuple[str, NDArray[np.int64], int],
    labels: tuple[str, NDArray[np.int64], int],
    batch_rows: Sequence[int],
) -> None:
    """Refuse a labels column whose rows are not as long as the ids' (each a column's
    name, its rows' first token and its tokens): a label is the target of the token at
    its place, so another length would pair every later token with another's label."""
    (column, starts, n), (name, lstarts, ln) = ids, labels
    lengths = np.diff(np.append(starts, n))
    llengths = np.diff(np.append(lstarts, ln))
    differ = np.flatnonzero(lengths != llengths)
    if not differ.size:
        return
    r = int(differ[0])
    b = int(np.searchsorted(np.cumsum(batch_rows), r, side="right"))
    raise DataError(
        f"{path}: row {r} (record batch {b}) has {int(llengths[r])} values in column "
        f"{name!r} but {int(lengths[r])} ids in {column!r} ({differ.size} rows differ): "
        "labels are read as the targets of the ids, one a token, so each row needs as "
        f"many; write {name!r} again from {column!r} (Hugging Face SFT: the ids with "
        "the prompt's set to -100)"
    )


@dataclass(frozen=True)
class _Views:
    """A list view's rows (``list_view``, ``large_list_view``): an offset and a size each,
    of ``width``, the rows anywhere in the values (out of order, overlapping)."""

    width: np.dtype[Any]


#: How a column's rows are found in its values: the dtype of its row offsets (a
#: ``list``, ``large_list``), every row's length (a ``fixed_size_list``, which has none),
#: or a list view's offsets and sizes.
_Rows = np.dtype[Any] | int | _Views


def _token_column(pa: Any, path: str, schema: Any, column: str) -> tuple[np.dtype[Any], _Rows]:
    """(token dtype, how its rows are found: :data:`_Rows`) of ``column``, a list of
    token ids."""
    if column not in schema.names:
        raise ConfigError(f"{path}: no column {column!r}; it has {', '.join(schema.names)}")
    typ = schema.field(column).type
    t = pa.types
    # A list view's rows are byte ranges of its ids too, one a row (or a run of rows).
    view = t.is_list_view(typ) or t.is_large_list_view(typ)
    listed = t.is_list(typ) or t.is_large_list(typ) or t.is_fixed_size_list(typ) or view
    if not listed or not (
        t.is_integer(typ.value_type) and numeric_dtype(pa, typ.value_type) in PACKED_DTYPES
    ):
        # Casting helps a list of other numbers; another kind of column is the wrong one.
        if listed and t.is_integer(typ.value_type):
            fix = (
                f"cast it first, e.g. datasets' ds.cast_column({column!r}, "
                "Sequence(Value('int32')))"
            )
        else:
            fix = "name the column of token id lists with column=..., e.g. 'input_ids'"
        raise ConfigError(
            f"{path}: column {column!r} is {typ}; packing reads a list of uint16, "
            f"uint32, int32 or int64 token ids ({fix})"
        )
    if t.is_fixed_size_list(typ):
        return numeric_dtype(pa, typ.value_type), int(typ.list_size)
    width = np.dtype(np.int64 if t.is_large_list(typ) or t.is_large_list_view(typ) else np.int32)
    return numeric_dtype(pa, typ.value_type), _Views(width) if view else width


def _remote_stream(
    path: str | list[str],
    column: str,
    store_options: dict[str, Any],
    in_flight: int,
    labels: str | None = None,
) -> TokenFile:
    """:func:`table_token_files` on object storage: the headers walked, row offsets fetched
    (of ``labels`` too, where given)."""
    from headrace.formats._arrow_remote import RemoteArrow
    from headrace.formats._table_layout import IPC_SUFFIXES
    from headrace.formats._table_part import _pa
    from headrace.formats._table_remote import resolve_urls
    from headrace.formats._table_schema import refuse_indices_mapping

    pa = _pa()
    columns = [column] if labels is None else [column, labels]
    files = ObjectFiles(store_options, check_in_flight(in_flight), name="headrace-pack")
    try:
        root, objects, saved = resolve_urls(path, files)
        other = [u for u, _ in objects if not u.endswith(IPC_SUFFIXES)]
        if other and other[0].endswith(".parquet"):
            raise ConfigError(f"{other[0]}: {_NOT_PARQUET}")
        if other:  # an object's name says how it is read, as Table reads it
            raise ConfigError(
                f"{other[0]}: not named as an Arrow IPC file ({', '.join(IPC_SUFFIXES)}); "
                "an object's name says how it is read: name it .arrow if it is one"
            )
        parts = RemoteArrow.open_all(objects, files, pa)
        dtypes: list[set[np.dtype[Any]]] = [set() for _ in columns]
        plans: list[list[Any]] = [[] for _ in columns]  # a column's, an object's
        for part, (_, info) in zip(parts, objects, strict=True):
            refuse_indices_mapping(pa, part.path, part.schema)
            handle = files.open(part.path, info.size, info.etag)
            for c, name in enumerate(columns):
                dtype, layout = _token_column(pa, part.path, part.schema, name)
                if part is parts[0] and c == 0:
                    _warn_unread_labels(
                        part.path, part.schema.names, column, stacklevel=4, labels=labels
                    )
                if dtypes[c] and dtype not in dtypes[c]:
                    raise ConfigError(
                        f"{part.path}: column {name!r} holds {dtype} ids, the shards before "
                        f"it {dtypes[c].pop()}: one stream needs one dtype"
                    )
                dtypes[c].add(dtype)
                plans[c].append(_offset_reads(pa, part, handle, name, layout))
        # Every object's row offsets fetched before the first failure (by object order)
        # is raised, each object whose GETs failed (a 403, 5xx after the retries, gone
        # since the listing) named, as those whose headers failed are.
        each = [
            [f for col in plans for _, _, _, fs in col[i][1] for f in fs] for i in range(len(parts))
        ]
        errors = iter(failures_of([f for fs in each for f in fs]))
        failed = []
        for part, fs in zip(parts, each, strict=True):
            mine = [e for e in itertools.islice(errors, len(fs)) if e is not None]
            if mine:
                failed.append((part.path, mine[0]))
        if failed:
            raise first_failed(failed, "of the table failed to open too")
    finally:
        files.close()
    made = [
        _remote_file(root, saved, objects, parts, name, dtypes[c].pop(), [r for _, r in plans[c]])
        for c, name in enumerate(columns)
    ]
    if labels is None:
        return made[0][0]
    (ids, starts), (said, lstarts) = made
    for part, a, b in zip(parts, starts, lstarts, strict=True):
        check_aligned(part.path, (column, *a), (labels, *b), part.index.rows)
    return dataclasses.replace(ids, labels=said)


def _remote_file(
    root: str,
    saved: str | None,
    objects: Sequence[tuple[str, Any]],
    parts: Sequence[Any],
    column: str,
    dtype: np.dtype[Any],
    plans: Sequence[list[tuple[int, int, NDArray[Any], list[Future[None]]]]],
) -> tuple[TokenFile, list[tuple[NDArray[np.int64], int]]]:
    """The :class:`TokenFile` of ``column`` in ``objects`` from its fetched row offsets
    (``plans``: :func:`_offset_reads` of each object), and each object's (row starts in
    tokens, tokens)."""
    isz = dtype.itemsize
    segments: list[tuple[int, int, int]] = []
    bounds: list[NDArray[np.int64]] = []
    tokens = 0
    first_rows: list[int] = []  # the dataset row each shard's rows start at
    rows = 0
    each: list[tuple[NDArray[np.int64], int]] = []
    for m, (part, reads) in enumerate(zip(parts, plans, strict=True)):
        first_rows.append(rows)
        before = len(bounds)
        for b, (at, limit, fetched, _) in enumerate(reads):
            row = rows - first_rows[-1]
            if fetched.ndim == 2:  # a list view's offsets and sizes
                runs, lengths, rel = _view_runs(
                    part.path, column, b, row, fetched[0], fetched[1], limit // isz
                )
                rows += fetched.shape[1]
            else:
                offsets = fetched.astype(np.int64)
                _check_offsets(part.path, column, b, row, offsets, limit // isz)
                runs, lengths, rel = _list_runs(offsets)
                rows += len(offsets) - 1
            segments.extend(
                (m, at + first * isz, n * isz)
                for first, n in zip(runs.tolist(), lengths.tolist(), strict=True)
            )
            bounds.append(tokens + rel)
            tokens += int(lengths.sum())
        mine = np.concatenate([*bounds[before:], np.zeros(0, np.int64)]).astype(np.int64)
        base = int(mine[0]) if mine.size else tokens
        each.append((mine - base, tokens - base))
    urls = [u for u, _ in objects]
    if tokens == 0:
        raise DataError(f"{root}: column {column!r} holds no tokens in {len(urls)} file(s)")
    made = TokenFile(
        path=urls[0] if len(urls) == 1 else root,
        dtype=dtype,
        num_tokens=tokens,
        format=f"arrow:{column}",
        members=tuple(urls),
        segments=np.asarray(segments, dtype=np.int64).reshape(-1, 3),
        bounds=np.concatenate([*bounds, [tokens]]).astype(np.int64),
        dataset=saved,
        member_infos=tuple((info.size, info.etag) for _, info in objects),
        member_rows=tuple(first_rows),
    )
    return made, each


def _offset_reads(
    pa: Any, part: Any, handle: Any, column: str, layout: _Rows
) -> tuple[Any, list[tuple[int, int, NDArray[Any], list[Future[None]]]]]:
    """Per record batch of ``part``: (where its values of ``column`` start in the object,
    how many bytes they may take, its row offsets (being fetched; a list view's: its
    rows' offsets, then their sizes, 2 x rows), the GETs' futures)."""
    from headrace.formats._arrow_format import _buffer_counts, _node_counts

    schema, index = part.schema, part.index
    c = schema.get_field_index(column)
    node = sum(_node_counts(pa, schema.field(i).type) for i in range(c))
    counts = [_buffer_counts(pa, schema.field(i).type) for i in range(c)]
    if any(k is None for k in counts):
        raise ConfigError(
            f"{part.path}: a column before {column!r} has a layout packing cannot step "
            "over (a union, view or run-end encoded column): drop it before saving"
        )
    first = sum(k for k in counts if k is not None)
    unknown = [f.name for f in schema if _buffer_counts(pa, f.type) is None]
    # The column's buffers: validity, offsets (not in a fixed-size list), sizes (a list
    # view's), the ids' validity, the ids.
    values = first + (2 if isinstance(layout, int) else 4 if isinstance(layout, _Views) else 3)
    reads = []
    row = 0
    for b, (start, _) in enumerate(index.spans):
        rows, nodes, bufs = index.rows[b], index.nodes[b], index.buffers[b]
        if nodes[node, 1]:
            raise DataError(
                f"{part.path}: column {column!r} has {int(nodes[node, 1])} null rows in rows "
                f"{row} to {row + rows - 1}; packing needs a token list in every row"
            )
        if nodes[node + 1, 1]:
            raise DataError(
                f"{part.path}: column {column!r} has null token ids in rows {row} to "
                f"{row + rows - 1}"
            )
        if bufs is None and unknown:
            # Not compressed (said so before): the object's index lists no buffers where
            # a column's layout is not known to it (a view: list views until
            # _arrow_format counts them), so its ids cannot be found in the body.
            raise ConfigError(
                f"{part.path}: column(s) {', '.join(map(repr, unknown))} have a layout "
                "whose buffers packing cannot find in an object's record batches; pack "
                "a local copy (read by the file's own reader), or drop or rewrite them "
                "as lists before saving"
            )
        if bufs is None:
            raise FormatError(
                f"{part.path}: record batch {b} is compressed; packing reads token lists as "
                "byte ranges of the file: write the dataset uncompressed (save_to_disk does)"
            )
        body = start + index.heads[b]
        fut: Future[None] = Future()
        more: list[Future[None]] = []
        if isinstance(layout, _Views):  # each row's offset, then each row's size
            offsets = np.zeros((2, rows), dtype=layout.width)
            for k in (0, 1):
                at, size = bufs[first + 1 + k].tolist()
                if size < offsets[k].nbytes:
                    what = ("offsets", "sizes")[k]
                    raise FormatError(
                        f"{part.path}: record batch {b}: {size} bytes of row {what} for {rows} rows"
                    )
                more.append(handle.read_into(offsets[k], body + at))
            fut.set_result(None)
        elif isinstance(layout, int):  # row i: ids [i * size, (i + 1) * size)
            offsets = np.arange(rows + 1, dtype=np.int64) * layout
            fut.set_result(None)
        elif rows:
            offsets = np.zeros(rows + 1, dtype=layout)
            at, size = bufs[first + 1].tolist()
            if size < offsets.nbytes:
                raise FormatError(
                    f"{part.path}: record batch {b}: {size} bytes of row offsets for {rows} rows"
                )
            fut = handle.read_into(offsets, body + at)
        else:  # no rows: nothing to fetch
            offsets = np.zeros(1, dtype=layout)
            fut.set_result(None)
        values_at, values_size = bufs[values].tolist()
        reads.append((body + values_at, values_size, offsets, [fut, *more]))
        row += rows
    return part, reads


def _segments(
    part: Any, column: str, dtype: np.dtype[Any], layout: _Rows
) -> tuple[NDArray[np.int64], NDArray[np.int64], int]:
    """(byte ranges of the values, in row order; row starts in tokens; tokens)."""
    isz = dtype.itemsize
    ranges: list[tuple[int, int]] = []
    starts: list[NDArray[np.int64]] = []
    tokens = row = 0
    for b, batch in enumerate(part.batches):
        col = batch.column(column)
        if col.null_count:
            first = row + int(np.flatnonzero(~valid_rows(col))[0])
            raise DataError(
                f"{part.path}: column {column!r} has {col.null_count} null rows (the first "
                f"is row {first}); packing needs a token list in every row"
            )
        child = col.values
        if child.null_count:
            raise DataError(
                f"{part.path}: column {column!r} has null token ids in rows {row} to "
                f"{row + len(col) - 1}"
            )
        values = child.buffers()[1]
        held = 0 if values is None else values.size // isz - child.offset
        if isinstance(layout, _Views):
            bufs = col.buffers()
            offs, sizes = (np.frombuffer(bufs[k], layout.width)[col.offset :] for k in (1, 2))
            offs, sizes = offs[: len(col)], sizes[: len(col)]
            runs, lengths, rel = _view_runs(part.path, column, b, row, offs, sizes, held)
        else:
            if isinstance(layout, int):  # row i: ids [i * size, (i + 1) * size) of the child
                offsets = np.arange(col.offset, col.offset + len(col) + 1, dtype=np.int64)
                offsets *= layout
            elif not len(col):  # no rows: Arrow lets their offsets buffer be empty
                offsets = np.zeros(1, dtype=np.int64)
            else:
                offsets = np.frombuffer(col.buffers()[1], dtype=layout)
                offsets = offsets[col.offset : col.offset + len(col) + 1].astype(np.int64)
            _check_offsets(part.path, column, b, row, offsets, held)
            runs, lengths, rel = _list_runs(offsets)
        for first, n in zip(runs.tolist(), lengths.tolist(), strict=True):
            at = values.address - part.map_address + (child.offset + first) * isz
            if at < 0 or at + n * isz > part.size:
                raise FormatError(
                    f"{part.path}: column {column!r}'s values are not stored as they are "
                    "read (a compressed Arrow IPC file?); packing reads them as byte ranges "
                    "of the file: write the dataset uncompressed (datasets' save_to_disk does)"
                )
            ranges.append((at, n * isz))
        starts.append(tokens + rel)
        tokens += int(lengths.sum())
        row += len(col)
    starts_all = np.concatenate([*starts, np.zeros(0, np.int64)]).astype(np.int64)
    return np.asarray(ranges, dtype=np.int64).reshape(-1, 2), starts_all, tokens


def _list_runs(offsets: NDArray[np.int64]) -> tuple[NDArray[np.int64], ...]:
    """:func:`_view_runs` of a list's rows (``offsets``, checked): one run of ids."""
    n = int(offsets[-1] - offsets[0])
    one = np.array([int(offsets[0])] if n else [], np.int64)
    return one, np.array([n] if n else [], np.int64), offsets[:-1] - offsets[0]


def _view_runs(
    path: str,
    column: str,
    batch: int,
    row: int,
    offsets: NDArray[Any],
    sizes: NDArray[Any],
    held: int,
) -> tuple[NDArray[np.int64], ...]:
    """(the first id of each run of ids the rows of a list view take one after another,
    the run's ids, each row's first token counted from the batch's first) of record
    batch ``batch`` (its first row: the file's ``row``), each row's ids checked to lie in
    its ``held`` values: read as they are, a damaged file's bytes before or past them
    were tokens. Rows that follow each other in the values are one run (one read)."""
    offsets, sizes = offsets.astype(np.int64), sizes.astype(np.int64)
    bad = np.flatnonzero((offsets < 0) | (sizes < 0) | (offsets + sizes > held))
    if bad.size:
        r = int(bad[0])
        lo, k = int(offsets[r]), int(sizes[r])
        raise FormatError(
            f"{path}: column {column!r}'s row {row + r} (record batch {batch}) takes ids "
            f"[{lo}, {lo + k}) of its list view's {held} values: {RECOPY}"
        )
    rel = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=rel[1:])
    kept = sizes > 0
    o, z = offsets[kept], sizes[kept]
    if not o.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), rel
    first = np.concatenate([[0], np.flatnonzero(o[1:] != o[:-1] + z[:-1]) + 1])
    return o[first], np.add.reduceat(z, first), rel


def _check_offsets(
    path: str, column: str, batch: int, row: int, offsets: NDArray[np.int64], held: int
) -> None:
    """Refuse row offsets of record batch ``batch`` (its first row: the file's ``row``)
    that are not a run of its ``held`` values: read as they are, a damaged file's bytes
    before or past them (its own offsets, the next buffer) were tokens, and offsets
    that go down made document bounds that go back (the position ids of other rows)."""
    if offsets[0] < 0 or offsets[-1] > held:
        raise FormatError(
            f"{path}: column {column!r}'s row offsets run past its values in record batch "
            f"{batch} ({int(offsets[0])} to {int(offsets[-1])} ids of {held} held): {RECOPY}"
        )
    down = np.flatnonzero(offsets[1:] < offsets[:-1])
    if down.size:
        r = int(down[0])
        raise FormatError(
            f"{path}: column {column!r}'s row offsets go down in record batch {batch}: "
            f"row {row + r} ends at id {int(offsets[r + 1])}, before it starts (at "
            f"{int(offsets[r])}): {RECOPY}"
        )


class _Segments:
    """Byte ranges of several files (or objects) as one run of ``size`` bytes.

    ``segments`` rows are (member, offset, length): member ``member``'s bytes
    ``[offset, offset + length)``, in order.
    """

    def __init__(self, path: str, segments: NDArray[np.int64]) -> None:
        self.path = path
        self._member = segments[:, 0]
        self._at = segments[:, 1]
        self._ends = np.cumsum(segments[:, 2])
        self.size = int(self._ends[-1]) if self._ends.size else 0

    def pieces(self, offset: int, n: int) -> list[tuple[int, int, int, int]]:
        """``(member, offset in it, start, end)`` for bytes ``[offset, offset + n)``:
        bytes ``[start, end)`` of the request come from that member at that offset."""
        i = int(np.searchsorted(self._ends, offset, side="right"))
        out = []
        done = 0
        while done < n:
            if i >= self._ends.size:
                raise ReadEOFError(
                    f"{self.path}: bytes [{offset}, {offset + n}) of its token lists are past "
                    f"their end ({self.size} bytes)"
                )
            pos = offset + done
            lo = int(self._ends[i - 1]) if i else 0
            take = min(n - done, int(self._ends[i]) - pos)
            out.append((int(self._member[i]), int(self._at[i]) + pos - lo, done, done + take))
            done += take
            i += 1
        return out


class RemoteSegments(_Segments):
    """:class:`SegmentedFile` on object storage: a block is a ranged GET per byte range it
    covers, all in flight at once, on the handles' request queue."""

    def __init__(
        self, path: str, handles: Sequence[RemoteFile], segments: NDArray[np.int64]
    ) -> None:
        super().__init__(path, segments)
        self._handles = list(handles)

    def read_into(self, out: NDArray[np.uint8], offset: int) -> Future[None]:
        """Start filling ``out`` with bytes ``[offset, offset + len(out))``; one future."""
        return joined(
            [
                self._handles[m].read_into(out[a:b], at)
                for m, at, a, b in self.pieces(offset, len(out))
            ],
            f"{self.path}: bytes [{offset}, {offset + len(out)}) of its token lists",
        )


class SegmentedFile(_Segments):
    """Byte ranges of local files read as one run of ``size`` bytes (positional reads).

    ``segments`` rows are (member, offset, length): ``members[member]``'s bytes
    ``[offset, offset + length)``. A member is opened at its first read (and its size
    checked against its ranges), and at most :data:`MAX_OPEN_MEMBERS` are held: the
    least recently read of the others are closed (opened again, and checked again,
    when read again), so an epoch over thousands of shards does not hold a descriptor
    each. ``versions``: each member's (size, version tag) where its ranges were found
    (:func:`table_token_files`); a member opened as another version is refused.
    """

    def __init__(
        self,
        path: str,
        members: Sequence[str],
        segments: NDArray[np.int64],
        versions: Sequence[tuple[int, str]] = (),
    ) -> None:
        super().__init__(path, segments)
        self._members = list(members)
        self._versions = list(versions)
        self._open: dict[int, LocalFile] = {}  # least recently read first
        self._reading: dict[int, int] = {}  # member -> reads under way (never closed)
        # Blocks are read on the I/O pool's threads: a member is opened once, and never
        # closed under a read.
        self._lock = threading.Lock()
        self._need = np.zeros(len(self._members), dtype=np.int64)
        np.maximum.at(self._need, self._member, segments[:, 1] + segments[:, 2])

    def _take(self, m: int) -> LocalFile:
        """Member ``m`` open, counted as read until :meth:`_done`."""
        with self._lock:
            f = self._open.pop(m, None)
            self._open[m] = f if f is not None else self._file(m)  # most recently read last
            self._reading[m] = self._reading.get(m, 0) + 1
            return self._open[m]

    def _done(self, m: int) -> None:
        with self._lock:
            self._reading[m] -= 1
            if not self._reading[m]:
                del self._reading[m]
            extra = len(self._open) - MAX_OPEN_MEMBERS
            for idle in [i for i in self._open if i not in self._reading][: max(0, extra)]:
                self._open.pop(idle).close()

    def _file(self, m: int) -> LocalFile:
        """Open member ``m``, checked against its ranges (and version)."""
        try:
            f = LocalFile(self._members[m])
        except ObjectNotFoundError as exc:  # there when its ranges were found
            raise gone_error(self._members[m], "token source") from exc
        need = int(self._need[m])
        if need > f.size:
            size = f.size
            f.close()
            if self._llmc:
                raise ReadEOFError(
                    f"{self._members[m]}: the llm.c shard's tokens end at byte {need} but "
                    f"the file has {size} bytes (it changed since the source opened it): "
                    "reopen the source to read the new version"
                )
            raise ReadEOFError(
                f"{self._members[m]}: the token lists end at byte {need} but the file "
                f"has {size} bytes (it changed since it was listed)"
            )
        if self._versions:
            self._check_version(m, f)
        return f

    def _check_version(self, m: int, f: LocalFile) -> None:
        """Refuse member ``m`` opened as another file or version than its ranges are of.

        The ranges are where the record batches put the token lists when they were
        found: a shard renamed over or written since (a dataset saved again under
        the same names) was read at them, the new file's tokens or its headers and
        offsets taken for tokens, at the first open and at any open after
        :meth:`close` (each epoch of a ``TorchDataset``, a worker's copy).
        """
        size, listed = self._versions[m]
        st = os.fstat(f.fd)
        now = f"{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}"
        if (st.st_size, now) != (size, listed):
            f.close()
            # An llm.c shard's range is its header's, read when the source opened it:
            # table_token_files never saw it (until 2026-12-07 it was told to call it).
            what, fix = (
                ("the llm.c shard changed since the source opened it", "reopen the source")
                if self._llmc
                else (
                    "the file changed since its token lists were found",
                    "call table_token_files again",
                )
            )
            raise StorageError(
                errno.ESTALE,
                f"{self._members[m]}: {what} ({size} bytes, device:inode:mtime_ns {listed} "
                f"then; {st.st_size} bytes, {now} now): replaced or written to; {fix} to "
                "read the new version",
            )

    @property
    def _llmc(self) -> bool:
        """Whether this is an llm.c shard (TokenFile.format ``"llmc"``): one member, the
        file itself, read from the end of its header to the end of the file (a table's
        Arrow file has its footer or end marker there)."""
        return (
            self._members == [self.path]
            and self._at.tolist() == [LLMC_HEAD]
            and bool(self._versions)
            and self._versions[0][0] == LLMC_HEAD + self.size
        )

    def pread_into(self, buf: NDArray[np.uint8], offset: int) -> None:
        """Fill ``buf`` with bytes ``[offset, offset + len(buf))`` of the concatenation."""
        for m, at, a, b in self.pieces(offset, len(buf)):
            f = self._take(m)
            try:
                f.pread_into(buf[a:b], at)
            finally:
                self._done(m)

    def close(self) -> None:
        with self._lock:
            for f in self._open.values():
                f.close()
            self._open.clear()
