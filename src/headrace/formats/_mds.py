"""A Source over a MosaicML Streaming MDS dataset, read in place (local or object storage).

MDS is random access by design: a shard's offsets table says where each sample
lies. Opening reads ``index.json`` and lists the shards (one LIST of the prefix, or
a ``stat`` a shard); nothing else. A shard's offsets table is read the first time a
batch needs one of its samples (all the shards a batch needs, at once), checked,
and kept (4 bytes a sample). Each batch's samples are then byte ranges of their
shards: locally through the range-read engine (:class:`~headrace.io.RangeReader`,
coalesced), on object storage as ranged GETs (coalesced alike), every shard's in
flight together. Where every column read has a fixed size and every column before
it too, only those columns' bytes of a sample are read, else the whole sample.

Sample ``k`` is row ``perm(k % n)`` of epoch ``k // n`` (``sample_rows``: the plan
every row source uses), so order, reshuffles, resume and host slicing are those of
the other sources. Samples come as dicts of arrays and a batch as
:func:`~headrace.formats._file_samples.stack_samples` makes FileSource's: stacked
where the batch's samples agree in shape and dtype, else an ``object`` array and
``<column>_shape``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError, FormatError, ObjectNotFoundError, StorageError
from headrace.formats._file_list import FileList, Listing, is_object_url, list_files
from headrace.formats._file_samples import stack_samples
from headrace.formats._images import ImageMode, check_image_mode, decode_jpeg, decode_png
from headrace.formats._lazy_queue import LazyQueue, LazyReader
from headrace.formats._mds_index import (
    VALUE_DTYPES,
    Column,
    MDSIndex,
    check_selected,
    parse_index,
)
from headrace.formats._object_files import DEFAULT_IN_FLIGHT, check_in_flight, check_store_options
from headrace.formats._row_plan import parse_shuffle, sample_rows
from headrace.io import STRATEGIES

if TYPE_CHECKING:
    from headrace.io import Strategy

__all__ = ["MDSSource", "MDSStats"]

INDEX = "index.json"
_U4 = np.dtype("<u4")


@dataclass(slots=True)
class MDSStats:
    """What a source has read: offsets tables (``headers``, their ``header_bytes``),
    samples and the bytes of their ranges (``bytes``, before coalescing)."""

    headers: int = 0
    header_bytes: int = 0
    samples: int = 0
    bytes: int = 0


class MDSSource:
    """Samples of an MDS dataset (Streaming's ``MDSWriter`` output) by global sample number.

    ``root``: the folder or object-store prefix holding ``index.json`` and the shards
    (``store_options`` go to :class:`~headrace.io.ObjectStore`, ``in_flight`` bounds
    the GETs at once). ``columns``: the columns to read (default: all); a batch holds
    each as an array, and ``index``, each sample's number in dataset order.
    ``shuffle``: ``True`` (``"full"``) permutes all samples per epoch, ``False``
    (``"none"``) reads them in order. ``reader``: the local read strategy
    (:class:`~headrace.io.ReaderConfig`). ``image_mode``: as FileSource's, for
    ``jpeg`` and ``png`` columns. See docs/files.md for encodings and refusals.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        columns: list[str] | tuple[str, ...] | None = None,
        shuffle: bool | Literal["none", "full"] = True,
        reader: Strategy = "adaptive",
        store_options: dict[str, Any] | None = None,
        in_flight: int = DEFAULT_IN_FLIGHT,
        image_mode: ImageMode | None = None,
    ) -> None:
        mode = parse_shuffle(shuffle)
        if mode == "window":
            raise ConfigError(
                "MDSSource takes shuffle=True ('full') or False ('none'); a windowed "
                "shuffle is not offered for MDS shards (got 'window')."
            )
        if reader not in STRATEGIES:
            raise ConfigError(f"reader must be one of {', '.join(STRATEGIES)} (got {reader!r}).")
        if columns is not None and not isinstance(columns, (list, tuple)):
            raise ConfigError(
                f"columns must be a list of column names (got {type(columns).__name__}: "
                "a set's order changes from one process to the next)."
            )
        self._build(
            os.fspath(root).rstrip("/"),
            {
                "columns": None if columns is None else list(columns),
                "shuffle": mode != "none",
                "reader": reader,
                "store_options": store_options,
                "in_flight": check_in_flight(in_flight),
                "image_mode": check_image_mode(image_mode, "image_mode"),
            },
            None,
        )

    def _build(
        self, root: str, args: dict[str, Any], carried: tuple[MDSIndex, Listing] | None
    ) -> None:
        """Open the dataset (``carried``: a copy's index and listing, read by its parent)."""
        self._args = args
        self.shuffle: bool = args["shuffle"]
        self.root = root
        self.remote = is_object_url(root)
        self._in_flight = args["in_flight"]
        self._reader_strategy = args["reader"]
        self._image_mode = args["image_mode"]
        where = f"{root}/{INDEX}"
        self.index, self.files = _open(root, where, args["store_options"], self.remote, carried)
        try:
            self.columns = check_selected(self.index, args["columns"], root)
            self._file_of = _shard_files(self.files, self.index, root)
        except BaseException:
            self.files.close()
            raise
        self.names = [c.name for c in self.columns]
        counts = np.array([s.samples for s in self.index.shards], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)])
        self.samples_per_epoch = int(self._starts[-1])
        if self.samples_per_epoch == 0:
            self.files.close()
            raise FormatError(f"{where}: its shards hold no samples")
        every = self.index.columns
        self._variable = sum(c.size is None for c in every)
        fixed = [c.size or 0 for c in every]
        self._min_sample = 4 * self._variable + sum(fixed)
        # Where a column starts in a sample, when every column before it is fixed-size.
        self._at: dict[str, int] = {}
        pos = 4 * self._variable
        for c in every:
            self._at[c.name] = pos
            if c.size is None:
                break
            pos += c.size
        narrow = all(c.size is not None and c.name in self._at for c in self.columns)
        # (lo, hi): the bytes of each sample read, when only the columns' are.
        self._narrow: tuple[int, int] | None = None
        if narrow:
            lo = min(self._at[c.name] for c in self.columns)
            hi = max(self._at[c.name] + (c.size or 0) for c in self.columns)
            self._narrow = (lo, hi)
        # Narrow reads (numbers and fixed-shape arrays: the fixed-size encodings) are
        # decoded a batch at once; False decodes them a sample at a time, as every other
        # column is (benchmarks/mds_fixed.py compares the two).
        self._vector = self._narrow is not None
        # Each shard's offsets as stored (uint32: 4 bytes a sample), once read.
        self._offsets: list[NDArray[np.uint32] | None] = [None] * len(self.index.shards)
        self._lock = threading.Lock()
        self._queue = LazyQueue(self._in_flight, "headrace-mds")
        self._reader = LazyReader(self._reader_strategy)
        self.stats = MDSStats()

    def __len__(self) -> int:
        return self.samples_per_epoch

    def __repr__(self) -> str:
        return (
            f"MDSSource({self.root!r}, {len(self.index.shards):,} shards, "
            f"{self.samples_per_epoch:,} samples, columns={self.names!r})"
        )

    def fingerprint(self) -> dict[str, Any]:
        return {
            "kind": "mds",
            "shards": [[s.basename, s.samples, s.bytes] for s in self.index.shards],
            "columns": [[c.name, c.encoding] for c in self.columns],
            "shuffle": self.shuffle,
            **({"image_mode": self._image_mode} if self._image_mode is not None else {}),
        }

    def read(self, seed: int, samples: NDArray[np.int64]) -> dict[str, NDArray[Any]]:
        rows = sample_rows(seed, samples, self.samples_per_epoch, self.shuffle)
        shard, local = self._locate(rows)
        needed = np.unique(shard).tolist()
        self._load_offsets(needed)
        begin = np.empty(len(rows), dtype=np.int64)
        length = np.empty(len(rows), dtype=np.int64)
        for s in needed:
            sel = shard == s
            off = self._offsets[s]
            assert off is not None
            begin[sel] = off[local[sel]]
            length[sel] = off[local[sel] + 1].astype(np.int64) - begin[sel]
        if self._narrow is not None:
            begin += self._narrow[0]
            length[:] = self._narrow[1] - self._narrow[0]
        pieces = self._fetch(
            [(s, np.flatnonzero(shard == s)) for s in needed], begin, length, len(rows)
        )
        with self._lock:
            self.stats.samples += len(rows)
            self.stats.bytes += int(length.sum())
        index = rows.astype(np.int64, copy=False)
        if self._vector:
            return self._fixed_batch(pieces, index)
        decoded = [
            self._decode(p, int(s), int(i))
            for p, s, i in zip(pieces, shard.tolist(), local.tolist(), strict=True)
        ]
        return stack_samples(decoded, index)

    def _fixed_batch(
        self, pieces: list[NDArray[np.uint8]], index: NDArray[np.int64]
    ) -> dict[str, NDArray[Any]]:
        """The batch of narrow reads of numbers and fixed-shape arrays: each column a
        view of the samples' bytes side by side, not a decode a sample."""
        assert self._narrow is not None
        lo, hi = self._narrow
        block = np.stack(pieces) if pieces else np.empty((0, hi - lo), np.uint8)
        out: dict[str, NDArray[Any]] = {"index": index}
        for c in self.columns:
            assert c.dtype is not None and c.size is not None
            a = self._at[c.name] - lo
            part = np.ascontiguousarray(block[:, a : a + c.size])
            shape = c.shape if c.kind == "ndarray" and c.shape is not None else ()
            little = np.dtype(c.dtype).newbyteorder("<")
            out[c.name] = part.view(little).reshape(len(index), *shape).astype(c.dtype)
        return out

    def _locate(self, rows: NDArray[np.int64]) -> tuple[NDArray[np.intp], NDArray[np.int64]]:
        """The shard of each row (dataset order) and its sample number in that shard."""
        shard = np.searchsorted(self._starts, rows, side="right") - 1
        return shard, rows - self._starts[shard]

    def file_item(self, index: Any) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(file, item)`` of a batch's ``index`` values: sample ``index`` is sample
        ``item`` of shard ``files.keys[file]`` (how ``check`` names where a sample lies)."""
        shard, item = self._locate(np.asarray(index, dtype=np.int64))
        return np.asarray(self._file_of, dtype=np.int64)[shard], item

    # -- offsets tables -------------------------------------------------------------

    def _load_offsets(self, shards: list[int]) -> None:
        """Read and check the offsets tables of ``shards`` not read yet, all at once."""
        with self._lock:
            todo = [s for s in shards if self._offsets[s] is None]
        if not todo:
            return
        heads = [4 * (self.index.shards[s].samples + 2) for s in todo]
        for s, n in zip(todo, heads, strict=True):
            size = self.files.sizes[self._file_of[s]]
            if size < n:
                raise FormatError(
                    f"{self._name(s)}: {size} bytes, shorter than the sample count and "
                    f"offsets of its {self.index.shards[s].samples} samples ({n} bytes): "
                    "truncated"
                )
        n_ = np.array(heads, dtype=np.int64)
        got = self._fetch(
            [(s, np.array([k])) for k, s in enumerate(todo)],
            np.zeros(len(todo), dtype=np.int64),
            n_,
            len(todo),
        )
        tables = [self._check_offsets(s, g) for s, g in zip(todo, got, strict=True)]
        with self._lock:
            for s, t in zip(todo, tables, strict=True):
                if self._offsets[s] is None:
                    self._offsets[s] = t
                    self.stats.headers += 1
                    self.stats.header_bytes += 4 * (len(t) + 1)

    def _check_offsets(self, s: int, head: NDArray[np.uint8]) -> NDArray[np.uint32]:
        name, want = self._name(s), self.index.shards[s].samples
        stored = np.frombuffer(head, _U4)
        words = stored.astype(np.int64)
        if int(words[0]) != want:
            raise FormatError(
                f"{name}: holds {int(words[0])} samples by its header, index.json says {want}"
            )
        off = words[1:]
        size = self.files.sizes[self._file_of[s]]
        if int(off[0]) < 4 * (want + 2):
            raise FormatError(
                f"{name}: its first sample starts at byte {int(off[0])}, inside the offsets "
                f"table ({4 * (want + 2)} bytes)"
            )
        steps = np.diff(off)
        bad = np.flatnonzero(steps <= 0)
        if bad.size:
            i = int(bad[0])
            raise FormatError(
                f"{name}: offsets not increasing: sample {i} starts at byte {int(off[i])} "
                f"and the next at {int(off[i + 1])}"
            )
        if int(off[-1]) > size:
            raise FormatError(
                f"{name}: {size} bytes, but its offsets say its samples end at byte "
                f"{int(off[-1])}: truncated"
            )
        if int(off[-1]) != size:
            raise FormatError(
                f"{name}: {size} bytes, but its offsets say its samples end at byte "
                f"{int(off[-1])}: {size - int(off[-1])} bytes after them"
            )
        exact = self._variable == 0
        bad = np.flatnonzero(steps != self._min_sample if exact else steps < self._min_sample)
        if bad.size:
            i = int(bad[0])
            said = "are" if exact else "need at least"
            raise FormatError(
                f"{name}: sample {i} is {int(steps[i])} bytes by its offsets; its columns' "
                f"fixed sizes {said} {self._min_sample} bytes"
            )
        return stored[1:].astype(np.uint32)  # native, and a copy of its own

    # -- reads -----------------------------------------------------------------------

    def _fetch(
        self,
        groups: list[tuple[int, NDArray[np.intp]]],
        begin: NDArray[np.int64],
        length: NDArray[np.int64],
        n: int,
    ) -> list[NDArray[np.uint8]]:
        """Bytes ``[begin[i], begin[i] + length[i])`` of the shard of each group's ``i``."""
        out: list[NDArray[np.uint8]] = [np.empty(0, np.uint8)] * n
        if not self.remote:
            for idx, got in self._read_local(
                [(self.files.name(self._file_of[s]), idx) for s, idx in groups], begin, length
            ):
                for i, g in zip(idx.tolist(), got, strict=True):
                    out[i] = g
            return out
        from headrace.formats._object_files import RemoteFile, wait_all
        from headrace.io import ObjectInfo, coalesce

        queue = self._queue.get()
        futures = []
        spans: list[tuple[NDArray[np.intp], Any, list[NDArray[np.uint8]]]] = []
        for s, idx in groups:
            f = self._file_of[s]
            remote = RemoteFile(
                self.files.store,
                self.files.keys[f],
                self.files.name(f),
                ObjectInfo(self.files.sizes[f], self.files.etags[f]),
                queue,
            )
            c = coalesce(np.stack([begin[idx], length[idx]], axis=1))
            bufs = [np.empty(int(b - a), np.uint8) for a, b in zip(c.starts, c.ends, strict=True)]
            for buf, a in zip(bufs, c.starts.tolist(), strict=True):
                futures.extend(remote.read_pieces(buf, a))
            spans.append((idx, c, bufs))
        wait_all(futures)
        for idx, c, bufs in spans:
            for i, k in zip(idx.tolist(), c.span.tolist(), strict=True):
                a = int(begin[i] - c.starts[k])
                out[i] = bufs[k][a : a + int(length[i])]
        return out

    def _read_local(
        self,
        groups: list[tuple[str, NDArray[np.intp]]],
        begin: NDArray[np.int64],
        length: NDArray[np.int64],
    ) -> list[tuple[NDArray[np.intp], list[NDArray[np.uint8]]]]:
        """Each file's ranges by the engine (coalesced), the files side by side: a batch
        touches a shard a sample or so under the global shuffle, and one shard after
        another waited a mount's latency once a shard. The files' reads run on the pool
        the engine's own reads do not use (O_DIRECT's deep pool, pread's I/O pool), so
        no task waits on a task queued behind it."""
        reader = self._reader.get()

        def one(path: str, idx: NDArray[np.intp]) -> tuple[NDArray[np.intp], Any]:
            return idx, reader.read(path, np.stack([begin[idx], length[idx]], axis=1))

        if len(groups) == 1:
            return [one(*groups[0])]
        from headrace.io._batch import results
        from headrace.io._pool import deep_io_pool, io_pool

        pool = io_pool() if self._reader_strategy.startswith("odirect") else deep_io_pool()
        return results([pool.submit(one, path, idx) for path, idx in groups])

    # -- decoding --------------------------------------------------------------------

    def _decode(self, data: NDArray[np.uint8], s: int, i: int) -> dict[str, NDArray[Any]]:
        """Sample ``i`` of shard ``s`` from its bytes (the narrow span, or all of it)."""
        if self._narrow is not None:
            lo = self._narrow[0]
            return {
                c.name: self._column(c, data[self._at[c.name] - lo :][: c.size], s, i)
                for c in self.columns
            }
        every = self.index.columns
        nvar = self._variable
        sizes = np.frombuffer(data[: 4 * nvar], _U4).tolist()
        pos, k, out = 4 * nvar, 0, {}
        wanted = {c.name for c in self.columns}
        for c in every:
            size = c.size
            if size is None:
                size, k = sizes[k], k + 1
            if c.name in wanted:
                out[c.name] = data[pos : pos + size]
            pos += size
        if pos != len(data):
            raise FormatError(
                f"{self._name(s)}: sample {i}: its column sizes add up to {pos} bytes, its "
                f"offsets give it {len(data)}"
            )
        return {c.name: self._column(c, out[c.name], s, i) for c in self.columns}

    def _column(self, c: Column, b: NDArray[np.uint8], s: int, i: int) -> NDArray[Any]:
        if c.kind == "scalar":
            assert c.dtype is not None
            return (
                np.frombuffer(b, np.dtype(c.dtype).newbyteorder("<"))[0:1]
                .reshape(())
                .astype(c.dtype)
            )
        if c.kind in ("bytes", "str", "json"):
            return b.copy()
        where = f"{self._name(s)}: sample {i}: column {c.name!r}"
        if c.kind == "jpeg":
            return decode_jpeg(b, name=where, mode=self._image_mode)
        if c.kind == "png":
            return decode_png(b, name=where, mode=self._image_mode)
        return _ndarray(c, b, where)

    def _name(self, s: int) -> str:
        return self.files.name(self._file_of[s])

    def close(self) -> None:
        """Close the request queue, the local reader and the object store (offsets kept)."""
        self._queue.close()
        self._reader.close()
        self.files.close()

    def __getstate__(self) -> dict[str, Any]:
        # A worker's copy opens its own reader and store, from the index and listing
        # read here: it neither reads index.json nor lists the shards again.
        f = self.files
        return {
            "root": self.root,
            "args": self._args,
            "index": self.index,
            "listing": (f.keys, f.sizes, f.etags),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._build(state["root"], state["args"], (state["index"], state["listing"]))

    def __enter__(self) -> MDSSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ndarray(c: Column, b: NDArray[np.uint8], where: str) -> NDArray[Any]:
    """An ``ndarray`` column's value: its declared dtype and shape, or those its bytes
    state first (a dtype byte, then ``ndim << 2 | shape width`` and the shape)."""
    at = 0
    dtype = c.dtype
    if dtype is None:
        code = int(b[0]) if len(b) else -1
        if code not in VALUE_DTYPES:
            raise FormatError(f"{where}: dtype byte {code} names no ndarray dtype")
        dtype, at = VALUE_DTYPES[code], 1
    shape = c.shape
    if shape is None:
        if len(b) <= at:
            raise FormatError(f"{where}: {len(b)} bytes end before the array's shape")
        byte = int(b[at])
        ndim, width = byte >> 2, 1 << (byte & 3)
        end = at + 1 + ndim * width
        if end > len(b):
            raise FormatError(f"{where}: {len(b)} bytes end inside the array's shape")
        shape = tuple(np.frombuffer(b[at + 1 : end], np.dtype(f"<u{width}")).tolist())
        at = end
    item = np.dtype(dtype).itemsize
    want = int(np.prod(shape, dtype=np.int64)) * item
    if len(b) - at != want:
        raise FormatError(
            f"{where}: {len(b) - at} bytes of values, an array {dtype} {shape} is {want}"
        )
    return np.frombuffer(b[at:], np.dtype(dtype).newbyteorder("<")).astype(dtype).reshape(shape)


def _open(
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
            return index, list_files(list(listing[0]), listing=listing)
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
            return index, remote_list(store, list(zip(*listing, strict=True)), options, None)
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
        return index, remote_list(store, rows, options, None)
    except BaseException:
        store.close()
        raise


def _refuse_repeats(index: MDSIndex, where: str) -> None:
    names = [s.basename for s in index.shards]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise FormatError(f"{where}: shard file(s) listed twice: {twice[:3]}")


def _shard_files(files: FileList, index: MDSIndex, root: str) -> list[int]:
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
