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

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError, DataError, FormatError, ReadEOFError
from headrace.formats._file_list import is_object_url
from headrace.formats._tokens import TokenFile
from headrace.io import LocalFile

__all__ = ["PACKED_DTYPES", "SegmentedFile", "table_token_files"]

#: Value types of a token-list column that can be read as a token stream.
PACKED_DTYPES = (
    np.dtype(np.uint16),
    np.dtype(np.uint32),
    np.dtype(np.int32),
    np.dtype(np.int64),
)


def table_token_files(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    column: str = "input_ids",
) -> list[TokenFile]:
    """The rows of ``column`` in every Arrow file of ``path``, concatenated: one stream.

    ``path`` is what :class:`~headrace.formats.Table` opens: a ``save_to_disk``
    folder (its ``state.json`` orders the shards), a folder of ``.arrow`` files,
    one file, a glob or a list. The shards make one stream in that order, as
    ``ds["input_ids"]`` is one sequence of rows: samples run across shards, an
    empty or short shard is just fewer tokens, and only the dataset's last ``L``
    tokens can go unsampled. Returned as a list of one :class:`TokenFile`, for
    :class:`~headrace.formats.TokenSource`. ``column`` must be a
    ``list``/``large_list`` of uint16, uint32, int32 or int64 without nulls. Only
    record batch headers are read (the values stay unread pages). Parquet
    (encoded, compressed pages), compressed Arrow IPC and object URLs are refused:
    their tokens are not byte ranges of a local file.
    """
    from headrace.formats._tables import _pa, _path_list, _resolve, saved_fingerprint

    paths = _path_list(path)
    remote = [os.fspath(p) for p in paths if is_object_url(os.fspath(p))]
    if remote:
        raise ConfigError(
            f"{remote[0]}: packing token lists reads byte ranges of local Arrow files; "
            "copy the dataset to local disk, or write its tokens as a token file"
        )
    root, files = _resolve(path if isinstance(path, (str, os.PathLike)) else paths)
    pa = _pa()
    dtypes: set[np.dtype[Any]] = set()
    segments, bounds = [], []
    tokens = 0
    for m, f in enumerate(files):
        dtype, seg, starts, n = _column_stream(pa, f, column)
        if dtypes and dtype not in dtypes:
            raise ConfigError(
                f"{f}: column {column!r} holds {dtype} ids, the shards before it "
                f"{dtypes.pop()}: one stream needs one dtype"
            )
        dtypes.add(dtype)
        segments.append(np.column_stack([np.full(len(seg), m), seg]))
        bounds.append(tokens + starts)
        tokens += n
    if tokens == 0:
        raise DataError(f"{root}: column {column!r} holds no tokens in {len(files)} file(s)")
    # An empty row starts where the next one does: a document of no tokens, harmless.
    return [
        TokenFile(
            path=files[0] if len(files) == 1 else root,
            dtype=dtypes.pop(),
            num_tokens=tokens,
            format=f"arrow:{column}",
            members=tuple(files),
            segments=np.concatenate(segments).astype(np.int64).reshape(-1, 3),
            bounds=np.concatenate([*bounds, [tokens]]).astype(np.int64),
            dataset=saved_fingerprint(root),
        )
    ]


def _column_stream(
    pa: Any, path: str, column: str
) -> tuple[np.dtype[Any], NDArray[np.int64], NDArray[np.int64], int]:
    """(dtype, byte ranges (offset, length), row starts in tokens, tokens) of one file."""
    from headrace.formats._tables import _Part, _refuse_indices_mapping

    part = _Part(path, pa)
    try:
        _refuse_indices_mapping(pa, path, part.schema)
        if part.parquet:
            raise ConfigError(
                f"{path}: a Parquet file's pages are encoded and compressed, so its token "
                "lists are not byte ranges of the file: pack from an Arrow copy (datasets' "
                "save_to_disk) or use TableSource, which pads rows instead"
            )
        if column not in part.schema.names:
            raise ConfigError(
                f"{path}: no column {column!r}; it has {', '.join(part.schema.names)}"
            )
        typ = part.schema.field(column).type
        listed = pa.types.is_list(typ) or pa.types.is_large_list(typ)
        if not listed or not (
            pa.types.is_integer(typ.value_type)
            and np.dtype(typ.value_type.to_pandas_dtype()) in PACKED_DTYPES
        ):
            # Casting helps a list of other numbers; another kind of column is the wrong one.
            fix = (
                "cast it first, e.g. datasets' "
                f"ds.cast_column({column!r}, Sequence(Value('int32')))"
                if listed and pa.types.is_integer(typ.value_type)
                else "name the column of token id lists with column=..., e.g. 'input_ids'"
            )
            raise ConfigError(
                f"{path}: column {column!r} is {typ}; packing reads a list of uint16, "
                f"uint32, int32 or int64 token ids ({fix})"
            )
        dtype = np.dtype(typ.value_type.to_pandas_dtype())
        segments, starts, n = _segments(part, column, dtype, pa.types.is_large_list(typ))
    finally:
        part.close()
    return dtype, segments, starts, n


def _segments(
    part: Any, column: str, dtype: np.dtype[Any], large: bool
) -> tuple[NDArray[np.int64], NDArray[np.int64], int]:
    """(byte ranges of the values, in row order; row starts in tokens; tokens)."""
    isz = dtype.itemsize
    ranges: list[tuple[int, int]] = []
    starts: list[NDArray[np.int64]] = []
    tokens = row = 0
    for batch in part.batches:
        col = batch.column(column)
        if col.null_count:
            first = row + int(np.flatnonzero(~np.asarray(col.is_valid()))[0])
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
        width = np.int64 if large else np.int32
        offsets = np.frombuffer(col.buffers()[1], dtype=width)
        offsets = offsets[col.offset : col.offset + len(col) + 1].astype(np.int64)
        n = int(offsets[-1] - offsets[0])
        if n:
            values = child.buffers()[1]
            at = values.address - part.map_address + (child.offset + int(offsets[0])) * isz
            if at < 0 or at + n * isz > part.size:
                raise FormatError(
                    f"{part.path}: column {column!r}'s values are not stored as they are "
                    "read (a compressed Arrow IPC file?); packing reads them as byte ranges "
                    "of the file: write the dataset uncompressed (datasets' save_to_disk does)"
                )
            ranges.append((at, n * isz))
        starts.append(tokens + offsets[:-1] - offsets[0])
        tokens += n
        row += len(col)
    starts_all = np.concatenate([*starts, np.zeros(0, np.int64)]).astype(np.int64)
    return np.asarray(ranges, dtype=np.int64).reshape(-1, 2), starts_all, tokens


class SegmentedFile:
    """Byte ranges of local files read as one run of ``size`` bytes (positional reads).

    ``segments`` rows are (member, offset, length): ``members[member]``'s bytes
    ``[offset, offset + length)``. A member is opened at its first read (and its size
    checked against its ranges), so a dataset of many shards holds open only those read.
    """

    def __init__(self, path: str, members: Sequence[str], segments: NDArray[np.int64]) -> None:
        self.path = path
        self._members = list(members)
        self._open: dict[int, LocalFile] = {}
        self._member = segments[:, 0]
        self._at = segments[:, 1]
        self._ends = np.cumsum(segments[:, 2])
        self.size = int(self._ends[-1]) if self._ends.size else 0
        self._need = np.zeros(len(self._members), dtype=np.int64)
        np.maximum.at(self._need, self._member, segments[:, 1] + segments[:, 2])

    def _file(self, m: int) -> LocalFile:
        f = self._open.get(m)
        if f is None:
            f = LocalFile(self._members[m])
            need = int(self._need[m])
            if need > f.size:
                size = f.size
                f.close()
                raise ReadEOFError(
                    f"{self._members[m]}: the token lists end at byte {need} but the file "
                    f"has {size} bytes (it changed since it was listed)"
                )
            self._open[m] = f
        return f

    def pread_into(self, buf: NDArray[np.uint8], offset: int) -> None:
        """Fill ``buf`` with bytes ``[offset, offset + len(buf))`` of the concatenation."""
        n = len(buf)
        i = int(np.searchsorted(self._ends, offset, side="right"))
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
            f = self._file(int(self._member[i]))
            f.pread_into(buf[done : done + take], int(self._at[i]) + pos - lo)
            done += take
            i += 1

    def close(self) -> None:
        for f in self._open.values():
            f.close()
        self._open.clear()
