"""A Source over a MosaicML Streaming MDS dataset, read in place (local or object storage).

MDS is random access by design: a shard's offsets table says where each sample
lies. Opening reads ``index.json`` and lists the shards (one LIST of the prefix, or
a ``stat`` a shard); nothing else. A shard's offsets table is read the first time a
batch needs one of its samples (all the shards a batch needs, at once), checked
(with the config MDSWriter writes after it: its columns must be the index's), and
kept (4 bytes a sample). Each batch's samples are then byte ranges of their
shards: locally through the range-read engine (:class:`~headrace.io.RangeReader`,
coalesced), on object storage as ranged GETs (coalesced alike), every shard's in
flight together. Where every column read has a fixed size and every column before
it too, only those columns' bytes of a sample are read, else the whole sample.

A compressed shard (Streaming's ``MDSWriter(compression=...)``) is fetched whole
(local read, or ranged GETs side by side), decompressed once on the I/O pool (the
batch's shards together) and held in a bounded cache (:mod:`._mds_cache`); its
offsets table and samples are then slices of those bytes. Under the windowed
shuffle the loader's ``prefetch`` has the next window's shards fetched and
decompressed in the background (:mod:`._mds_ahead`), beside the current window's.

Sample ``k`` is row ``perm(k % n)`` of epoch ``k // n`` (``sample_rows``: the plan
every row source uses), or, with ``shuffle="window"``, the windowed shuffle of the
Parquet tables with shards for row groups (:class:`RowWindows`), so order,
reshuffles, resume and host slicing are those of the other sources. Samples come
as dicts of arrays and a batch as
:func:`~headrace.formats._file_samples.stack_samples` makes FileSource's: stacked
where the batch's samples agree in shape and dtype, else an ``object`` array and
``<column>_shape``.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import NDArray

from headrace._closing import Closing
from headrace._warn import warn_user
from headrace.errors import ConfigError, FormatError
from headrace.formats._file_list import Listing, is_object_url
from headrace.formats._file_samples import stack_samples
from headrace.formats._images import ImageMode, check_image_mode, decode_jpeg, decode_png
from headrace.formats._lazy_queue import LazyQueue, LazyReader
from headrace.formats._mds_ahead import ReadAhead, plan_ahead
from headrace.formats._mds_cache import ShardCache, default_cache_bytes
from headrace.formats._mds_codecs import check_hashes, decompress, require_codec
from headrace.formats._mds_index import Column, MDSIndex, check_selected, decode_ndarray
from headrace.formats._mds_open import INDEX, open_mds, shard_files
from headrace.formats._npy_ranges import CACHE_BLOCK
from headrace.formats._object_files import DEFAULT_IN_FLIGHT, check_in_flight
from headrace.formats._pace import Pace, pooled
from headrace.formats._row_plan import (
    RowWindows,
    ShuffleMode,
    check_window_rows,
    parse_shuffle,
    sample_rows,
    shuffle_fingerprint,
)
from headrace.io import STRATEGIES, CacheStats, open_cache
from headrace.io._mounts import local_cache_refused
from headrace.io._open_files import gone_error
from headrace.io._pool import deep_io_pool, io_pool

if TYPE_CHECKING:
    from headrace.io import ObjectCache, Strategy

__all__ = ["MDSSource", "MDSStats"]

_U4 = np.dtype("<u4")
#: The lists of the config MDSWriter writes into each shard that _check_config compares.
_CONFIG_KEYS = ("column_names", "column_encodings", "column_sizes")
#: A local shard's read slower than this, plus what its samples account for at a
#: page-cache pace (``_read_s``), sends a batch's other shards to threads.
_SLOW_SHARD_S = 150e-6
#: The default window of ``shuffle="window"``: about this many bytes of shards (as
#: decompressed), whatever the samples' size; the cache's default holds two.
WINDOW_BYTES = 1 << 30


@dataclass(slots=True)
class MDSStats:
    """What a source has read: offsets tables (``headers``, their ``header_bytes``),
    samples and the bytes of their ranges (``bytes``, before coalescing); compressed
    shards decompressed (``unzipped``), the bytes fetched for them (``zip_bytes``) and
    the bytes they decompressed to (``unzipped_bytes``); of those shards, how many the
    read-ahead loaded (``ahead``), and how many it failed to (``ahead_failed``: read
    again by the reads that needed them)."""

    headers: int = 0
    header_bytes: int = 0
    samples: int = 0
    bytes: int = 0
    unzipped: int = 0
    zip_bytes: int = 0
    unzipped_bytes: int = 0
    ahead: int = 0
    ahead_failed: int = 0


def check_split(split: object) -> str:
    """``split`` as a path below the dataset's root: a name, or names joined by ``/``."""
    parts = split.split("/") if isinstance(split, str) else []
    if not parts or any(p in ("", ".", "..") or "\\" in p for p in parts):
        raise ConfigError(
            f"split must name a folder below root, as Streaming's split= does (got "
            f"{split!r}): e.g. 'train' reads root/train/index.json."
        )
    return "/".join(parts)


def _read_s(got: tuple[NDArray[np.intp], list[NDArray[np.uint8]]]) -> float:
    """What a local read of a shard's samples ``got`` may take from the page cache: 5 us
    a sample and 1 us a KB."""
    return 5e-6 * len(got[0]) + sum(g.nbytes for g in got[1]) / 1e9


class MDSSource(Closing):
    """Samples of an MDS dataset (Streaming's ``MDSWriter`` output) by global sample number.

    ``root``: the folder or object-store prefix holding ``index.json`` and the shards
    (``store_options`` go to :class:`~headrace.io.ObjectStore`, ``in_flight`` bounds
    the GETs at once). ``columns``: the columns to read (default: all); a batch holds
    each as an array, and ``index``, each sample's number in dataset order.
    ``shuffle``: ``"full"`` permutes all samples per epoch; ``"window"`` visits
    windows of consecutive shards (about ``window_rows`` samples, or one larger
    shard, read in sub-windows of ``window_rows``) in a permuted order and each
    window's samples in a permuted order, keyed by ``(seed, epoch)`` (Parquet's
    windowed shuffle: docs/rows.md); ``window_rows=None``: windows of about 1 GiB
    of shards. ``True`` (default) is ``"window"`` when the shards are compressed,
    else ``"full"``; ``False`` (``"none"``) reads samples in order.
    ``shard_cache_bytes``: the most bytes of decompressed shards held (default:
    2 GiB, or two windows where more: the one read and the next, read ahead in a
    ``Loader`` (:meth:`prefetch`); at most a quarter of the memory available).
    ``reader``: the local read strategy (:class:`~headrace.io.ReaderConfig`).
    ``image_mode``: as FileSource's, for ``jpeg`` and ``png`` columns.
    ``cache_dir``: on object storage, keep what is read on local disk (up to
    ``cache_bytes``) and read it from there the next time (an epoch, a restart, another
    process): compressed shards whole, uncompressed ones as the 64 KiB blocks their
    samples touch (:class:`headrace.io.ObjectCache`). ``split``: a subfolder of
    ``root`` (Streaming's ``split=``: ``root/train`` for ``"train"``). See docs/files.md
    for encodings, codecs and refusals.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        columns: list[str] | tuple[str, ...] | None = None,
        shuffle: bool | Literal["none", "full", "window"] = True,
        window_rows: int | None = None,
        shard_cache_bytes: int | None = None,
        reader: Strategy = "adaptive",
        store_options: dict[str, Any] | None = None,
        in_flight: int = DEFAULT_IN_FLIGHT,
        image_mode: ImageMode | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_bytes: int | None = None,
        split: str | None = None,
    ) -> None:
        mode = parse_shuffle(shuffle)
        root = os.fspath(root).rstrip("/")
        if split is not None:
            root = f"{root}/{check_split(split)}"
        if cache_dir is not None and not is_object_url(root):
            raise local_cache_refused(f"{root!r}", [os.path.join(root, INDEX)])
        if window_rows is not None:
            window_rows = check_window_rows(window_rows, "None: about 1 GiB of shards")
        if shard_cache_bytes is not None and (
            isinstance(shard_cache_bytes, bool)
            or not isinstance(shard_cache_bytes, int)
            or shard_cache_bytes < 1
        ):
            raise ConfigError(
                f"shard_cache_bytes must be an integer >= 1 (got {shard_cache_bytes!r}): the "
                "most bytes of decompressed shards held (None: the default)."
            )
        if reader not in STRATEGIES:
            raise ConfigError(f"reader must be one of {', '.join(STRATEGIES)} (got {reader!r}).")
        if columns is not None and not isinstance(columns, (list, tuple)):
            raise ConfigError(
                f"columns must be a list of column names (got {type(columns).__name__}: "
                "a set's order changes from one process to the next)."
            )
        self._build(
            root,
            {
                "columns": None if columns is None else list(columns),
                "shuffle": mode,
                "window_rows": window_rows,
                "shard_cache_bytes": shard_cache_bytes,
                "reader": reader,
                "store_options": store_options,
                "in_flight": check_in_flight(in_flight),
                "image_mode": check_image_mode(image_mode, "image_mode"),
                "cache_dir": None if cache_dir is None else os.fspath(cache_dir),
                "cache_bytes": cache_bytes,
            },
            None,
        )

    def _build(
        self, root: str, args: dict[str, Any], carried: tuple[MDSIndex, Listing] | None
    ) -> None:
        """Open the dataset (``carried``: a copy's index and listing, read by its parent)."""
        self._args = args
        self.root = root
        self.remote = is_object_url(root)
        self._in_flight = args["in_flight"]
        self._reader_strategy = args["reader"]
        self._image_mode = args["image_mode"]
        where = f"{root}/{INDEX}"
        objects_cache = open_cache(args["cache_dir"], args["cache_bytes"])
        self.index, self.files = open_mds(
            root, where, args["store_options"], self.remote, carried, objects_cache
        )
        try:
            self.columns = check_selected(self.index, args["columns"], root)
            self._file_of = shard_files(self.files, self.index, root)
            for codec in sorted({s.codec for s in self.index.shards if s.codec}):
                require_codec(codec, root)
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
        # The bytes read past a shard's offsets table for its config (_check_config):
        # as long as MDSWriter's of these columns, uncompressed, no hashes and its
        # default size limit, and 32 more (a codec's name, a hash or two); a longer one
        # is read by a second read.
        config = {
            "column_encodings": [c.encoding for c in every],
            "column_names": [c.name for c in every],
            "column_sizes": [c.size for c in every],
            "compression": None,
            "format": "mds",
            "hashes": [],
            "size_limit": 1 << 26,
            "version": 2,
        }
        self._config_bytes = len(json.dumps(config, sort_keys=True).encode()) + 32
        self._renamed_said = False
        # Each shard's offsets as stored (uint32: 4 bytes a sample), once read.
        self._offsets: list[NDArray[np.uint32] | None] = [None] * len(self.index.shards)
        self._lock = threading.Lock()
        self._queue = LazyQueue(self._in_flight, "headrace-mds")
        self._reader = LazyReader(self._reader_strategy)
        # Where a read's shards go: one after another while quick, side by side once
        # reads prove slow, until a read's quickest is quick again (Pace).
        pool = io_pool if self._reader_strategy.startswith("odirect") else deep_io_pool
        self._pace = Pace(_SLOW_SHARD_S, _read_s, pool=pool, recover=True)
        self.stats = MDSStats()
        self._share: tuple[float, float] | None = None  # this host's, once told
        self._order(args, warn=carried is None)
        self._ahead = ReadAhead(self.cache, self._unzip, self._count_ahead)

    def _order(self, args: dict[str, Any], warn: bool) -> None:
        """The shuffle, its windows, and the cache of decompressed shards (``warn``: say
        so where the cache is too small; a worker's copy does not say it again)."""
        shards = self.index.shards
        # The compressed shards (read through the cache).
        self._zipped = frozenset(k for k, s in enumerate(shards) if s.codec)
        zipped = bool(self._zipped)
        #: Each shard's size as read: decompressed, or the stored file's.
        self._raw: list[int] = [
            s.raw_bytes if s.raw_bytes is not None else self.files.sizes[f]
            for s, f in zip(shards, self._file_of, strict=True)
        ]
        raw = np.array(self._raw, dtype=np.int64)
        mode: ShuffleMode | None = args["shuffle"]
        # The default follows the index, not the files stored: a Streaming cache's shards
        # read decompressed (read_from) are shuffled as the compressed dataset is.
        listed_zipped = any((s.listed or s).codec for s in shards)
        self.shuffle: ShuffleMode = mode or ("window" if listed_zipped else "full")
        self.windows: RowWindows | None = None
        two = 0  # the two largest windows' bytes: what the default cache holds
        if self.shuffle == "window":
            wr = args["window_rows"]
            if wr is None:  # from the index alone: the same windows on every machine
                wr = max(1, WINDOW_BYTES * self.samples_per_epoch // max(1, int(raw.sum())))
            self.window_rows: int = wr
            self.windows = w = RowWindows([s.samples for s in shards], wr)
            sizes = sorted(int(raw[list(w.groups(k))].sum()) for k in range(w.num_windows))
            two = sum(sizes[-2:])
        cache = args["shard_cache_bytes"]
        self.cache = ShardCache(default_cache_bytes(two) if cache is None else cache)
        if not zipped or not warn:
            return
        if self.windows is not None:
            need = sizes[-1]
            what = "a window of shards"
            fix = "lower window_rows"
            if need <= self.cache.max_bytes < two:
                warn_user(
                    f"{self.root}: the cache of decompressed shards ({self.cache.max_bytes:,} "
                    f"bytes, shard_cache_bytes) holds a window of shards but not two "
                    f"({two:,} bytes), so the next window is read ahead only in part and "
                    f"its first batch waits for the rest; raise shard_cache_bytes or {fix}"
                )
        else:
            need = int(raw.sum()) if self.shuffle == "full" else int(raw.max())
            what = "every shard" if self.shuffle == "full" else "a shard"
            fix = "use shuffle='window'"
        if need > self.cache.max_bytes:
            mean = int(raw.mean())
            warn_user(
                f"{self.root}: the cache of decompressed shards ({self.cache.max_bytes:,} "
                f"bytes, shard_cache_bytes) cannot hold {what} ({need:,} bytes), so shards "
                f"are decompressed again and again (about {mean:,} bytes a shard"
                + (", for nearly every sample" if self.shuffle == "full" else "")
                + ("; nothing is read ahead" if self.windows is not None else "")
                + f"); raise shard_cache_bytes or {fix}"
            )

    @property
    def cache_stats(self) -> CacheStats | None:
        """What ``cache_dir``'s cache did in this process (``None`` without one)."""
        cache = self.files.cache
        return None if cache is None else cache.stats

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
            "shards": [
                [e.basename, e.samples, e.bytes] for e in (s.listed or s for s in self.index.shards)
            ],
            "columns": [[c.name, c.encoding] for c in self.columns],
            # True / False as before windows existed, so saved states still load.
            **shuffle_fingerprint(
                self.shuffle,
                self.window_rows if self.windows is not None else 0,
                self.windows is not None and self.windows.split,
            ),
            **({"image_mode": self._image_mode} if self._image_mode is not None else {}),
        }

    def _rows(self, seed: int, samples: NDArray[np.int64]) -> NDArray[np.int64]:
        """The row (dataset order) of each global sample number."""
        if self.windows is not None:
            return self.windows.rows(seed, np.asarray(samples, dtype=np.int64))
        return sample_rows(seed, samples, self.samples_per_epoch, self.shuffle == "full")

    def starts(
        self, seed: int, samples: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Where each sample lies: (0, its row in dataset order), shards in order. What
        ``Loader(host_order="address")`` sorts each batch by."""
        rows = self._rows(seed, samples)
        return np.zeros_like(rows), rows

    def prefetch(
        self, seed: int, samples: NDArray[np.int64], share: tuple[float, float] | None = None
    ) -> None:
        """Under the windowed shuffle over compressed shards, start loading (fetching and
        decompressing, in the background) the shards of these samples' windows and of
        the window after, so that a window switch does not wait for its shards.

        With ``share`` (this host's fraction of each window in row order, from a
        ``Loader(host_order="address")``), only the shards of that stretch and 5% of
        the window a side; else all of the next window, on every host. The current
        windows' shards are kept: the next window's are loaded only as far as they fit
        the cache beside them. Other shuffles and uncompressed shards read nothing ahead.
        """
        if share is not None:
            self._share = share
        samples = np.asarray(samples, dtype=np.int64)
        if self.windows is None or not samples.size or not self._zipped:
            return
        keep, want = plan_ahead(
            self.windows,
            seed,
            samples,
            self._share,
            (self._starts, self._zipped, self._raw),
            self.cache.max_bytes,
        )
        self.cache.keep = frozenset(keep)
        self._ahead.want(want)

    def _count_ahead(self, shards: int, loaded: bool) -> None:
        with self._lock:
            if loaded:
                self.stats.ahead += shards
            else:
                self.stats.ahead_failed += shards

    def read(self, seed: int, samples: NDArray[np.int64]) -> dict[str, NDArray[Any]]:
        rows = self._rows(seed, samples)
        shard, local = self._locate(rows)
        needed = np.unique(shard).tolist()
        begin = np.empty(len(rows), dtype=np.int64)
        length = np.empty(len(rows), dtype=np.int64)
        pieces: list[NDArray[np.uint8]] = [np.empty(0, np.uint8)] * len(rows)
        # Compressed shards a group at a time, each group's decompressed bytes at most
        # the cache's (or one shard): a read of thousands of samples under the full
        # shuffle touches thousands of shards, and must not hold them all at once.
        for group in self._groups(needed):
            held = self._unzipped(group)
            self._load_offsets(group, held)
            idx = [np.flatnonzero(shard == s) for s in group]
            for s, sel in zip(group, idx, strict=True):
                off = self._offsets[s]
                assert off is not None
                begin[sel] = off[local[sel]]
                length[sel] = off[local[sel] + 1].astype(np.int64) - begin[sel]
                if self._narrow is not None:
                    begin[sel] += self._narrow[0]
                    length[sel] = self._narrow[1] - self._narrow[0]
            got = self._fetch(list(zip(group, idx, strict=True)), begin, length, len(rows), held)
            for sel in idx:
                for i in sel.tolist():
                    pieces[i] = got[i]
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
        return stack_samples(decoded, index, where=self.root)

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

    def _load_offsets(self, shards: list[int], held: dict[int, NDArray[np.uint8]]) -> None:
        """Read and check the offsets tables of ``shards`` not read yet, all at once
        (those of compressed shards from their decompressed bytes, ``held``)."""
        with self._lock:
            todo = [s for s in shards if self._offsets[s] is None]
        if not todo:
            return
        heads = [4 * (self.index.shards[s].samples + 2) for s in todo]
        for s, n in zip(todo, heads, strict=True):
            size = self._raw[s]
            if size < n:
                raise FormatError(
                    f"{self._name(s)}: {size} bytes, shorter than the sample count and "
                    f"offsets of its {self.index.shards[s].samples} samples ({n} bytes): "
                    "truncated"
                )
        # The table and the writer's config after it (as long as the index's columns
        # make it, and some), in the same read: _check_config.
        n_ = np.array(
            [min(n + self._config_bytes, self._raw[s]) for s, n in zip(todo, heads, strict=True)],
            dtype=np.int64,
        )
        got = self._fetch(
            [(s, np.array([k])) for k, s in enumerate(todo)],
            np.zeros(len(todo), dtype=np.int64),
            n_,
            len(todo),
            held,
            first=True,
        )
        tables = [self._check_offsets(s, g) for s, g in zip(todo, got, strict=True)]
        self._check_configs(todo, got, tables, held)
        with self._lock:
            for s, t in zip(todo, tables, strict=True):
                if self._offsets[s] is None:
                    self._offsets[s] = t
                    self.stats.headers += 1
                    self.stats.header_bytes += 4 * (len(t) + 1)

    def _check_offsets(self, s: int, head: NDArray[np.uint8]) -> NDArray[np.uint32]:
        name, want = self._name(s), self.index.shards[s].samples
        table = 4 * (want + 2)
        stored = np.frombuffer(head[:table], _U4)
        words = stored.astype(np.int64)
        if int(words[0]) != want:
            raise FormatError(
                f"{name}: holds {int(words[0])} samples by its header, index.json says {want}"
            )
        off = words[1:]
        size = self._raw[s]
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

    def _check_configs(
        self,
        shards: list[int],
        got: list[NDArray[np.uint8]],
        tables: list[NDArray[np.uint32]],
        held: dict[int, NDArray[np.uint8]],
    ) -> None:
        """Check the configs of ``shards`` (``got``: their first bytes read, ``tables``
        their offsets), the rest of those longer than read read first, side by side
        (up to 64 KiB of one: a longer one is another writer's, not checked)."""
        ends = [int(t[0]) for t in tables]
        more = [
            k for k, (g, end) in enumerate(zip(got, ends, strict=True)) if len(g) < end <= 1 << 16
        ]
        if more:
            rest = self._fetch(
                [(shards[k], np.array([i])) for i, k in enumerate(more)],
                np.array([len(got[k]) for k in more], dtype=np.int64),
                np.array([ends[k] - len(got[k]) for k in more], dtype=np.int64),
                len(more),
                held,
                first=True,
            )
            got = list(got)
            for k, r in zip(more, rest, strict=True):
                got[k] = np.concatenate([got[k], r])
        for s, g, end in zip(shards, got, ends, strict=True):
            table = 4 * (self.index.shards[s].samples + 2)
            self._check_config(s, g[table:], end - table)

    def _check_config(self, s: int, after: NDArray[np.uint8], length: int) -> None:
        """Check the columns of the config ``MDSWriter`` writes into each shard (the
        ``length`` bytes after its offsets table; ``after``: those read) against
        index.json's. The index alone places every column's bytes, so an index that is
        not the shards' (edited, or another run's) read other values without a word: an
        ``int`` listed as ``float64`` gave 7 as 3.5e-323. Encodings or sizes that differ
        are refused; names alone are said once (a rename in the index reads as
        Streaming reads it). A config not read whole, not JSON, or without the three
        lists (another writer's) is not checked."""
        if len(after) < length:
            return
        try:
            config = json.loads(bytes(after[:length]))
        except (UnicodeDecodeError, ValueError):
            return
        got = [config.get(k) if isinstance(config, dict) else None for k in _CONFIG_KEYS]
        lists = [v for v in got if isinstance(v, list)]
        if len(lists) != len(got) or len({len(v) for v in lists}) > 1:
            return
        theirs = list(zip(*lists, strict=True))
        ours = [(c.name, c.encoding, c.size) for c in self.index.columns]
        if theirs == ours:
            return
        name = self._name(s)
        if [t[1:] for t in theirs] != [o[1:] for o in ours]:
            # The columns that differ (all of them where their counts do).
            same = len(theirs) == len(ours)
            k = [i for i in range(len(ours)) if not same or theirs[i] != ours[i]]
            raise FormatError(
                f"{name}: index.json gives columns (name, encoding, size) "
                f"{[ours[i] for i in k]}, the shard's own config (MDSWriter writes it into "
                f"each shard) {[theirs[i] for i in k] if same else theirs}: read by the "
                "index, its bytes would be other values. The index is not this shard's "
                "(edited, or another run's): write the dataset, or its index.json, again"
            )
        with self._lock:
            said, self._renamed_said = self._renamed_said, True
        if not said:
            warn_user(
                f"{name}: its own config names columns {[t[0] for t in theirs]}, index.json "
                f"{[o[0] for o in ours]} (encodings alike): read by index.json's names, as "
                "Streaming reads them; if the index is another dataset's, its columns hold "
                "other data"
            )

    # -- reads -----------------------------------------------------------------------

    def _fetch(
        self,
        groups: list[tuple[int, NDArray[np.intp]]],
        begin: NDArray[np.int64],
        length: NDArray[np.int64],
        n: int,
        held: dict[int, NDArray[np.uint8]],
        whole: bool = False,
        first: bool = False,
    ) -> list[NDArray[np.uint8]]:
        """Bytes ``[begin[i], begin[i] + length[i])`` of the shard of each group's ``i``:
        slices of its decompressed bytes where ``held`` has them, else read (``whole``:
        each group's one range is all of its stored file, a compressed shard's;
        ``first``: each shard's first read, its offsets table)."""
        out: list[NDArray[np.uint8]] = [np.empty(0, np.uint8)] * n
        stored = []
        for s, idx in groups:
            if s not in held:
                stored.append((s, idx))
                continue
            data = held[s]
            for i in idx.tolist():  # a copy: the shard may be dropped before the batch is made
                out[i] = data[int(begin[i]) : int(begin[i] + length[i])].copy()
        groups = stored
        if not groups:
            return out
        if not self.remote:
            for idx, got in self._read_local(
                [(self._file_of[s], idx) for s, idx in groups],
                begin,
                length,
                paced=not (whole or first),
            ):
                for i, g in zip(idx.tolist(), got, strict=True):
                    out[i] = g
            return out
        if self.files.cache is not None and not whole:
            return self._fetch_blocks(groups, begin, length, out)
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
                # A compressed shard's stored file, kept whole (in 8 MiB pieces) on disk.
                self._kept(f),
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

    def _kept(self, f: int) -> tuple[ObjectCache, str] | None:
        """Where shard file ``f``'s reads are kept (``cache_dir``), if anywhere."""
        cache, key = self.files.cache, self.files.cache_key
        return None if cache is None or key is None else (cache, key(f))

    def _fetch_blocks(
        self,
        groups: list[tuple[int, NDArray[np.intp]]],
        begin: NDArray[np.int64],
        length: NDArray[np.int64],
        out: list[NDArray[np.uint8]],
    ) -> list[NDArray[np.uint8]]:
        """:meth:`_fetch`'s ranges of uncompressed shards on object storage through the
        cache (``cache_dir``): as the 64 KiB blocks they touch, each kept as an entry
        (:meth:`FileList.start_blocks`), so that a sample is found again whatever
        samples share its read: the blocks held read here, the rest's GETs, every
        shard's, in flight at once."""
        from headrace.formats._object_files import wait_all
        from headrace.io._ranges import merge_ranges

        queue = self._queue.get()
        futures = []
        started = []
        for s, idx in groups:
            f = self._file_of[s]
            # The samples' own bytes (not joined across gaps: a warm cache reads only
            # them; the blocks the cache lacks are fetched a run of them a GET).
            a = begin[idx].tolist()
            spans = merge_ranges(zip(a, (begin[idx] + length[idx]).tolist(), strict=True))
            image = np.empty(self.files.sizes[f], np.uint8)  # pages touched only
            pending, keep = self.files.start_blocks(f, queue, spans, image, CACHE_BLOCK)
            futures += pending
            started.append((idx, image, keep))
        wait_all(futures)
        for idx, image, keep in started:
            keep()
            for i in idx.tolist():  # views, as the GETs' buffers' below (pages not read
                # or fetched take no memory); a batch's stacking copies them once
                out[i] = image[int(begin[i]) : int(begin[i] + length[i])]
        return out

    def _read_local(
        self,
        groups: list[tuple[int, NDArray[np.intp]]],
        begin: NDArray[np.int64],
        length: NDArray[np.int64],
        paced: bool = True,
    ) -> list[tuple[NDArray[np.intp], list[NDArray[np.uint8]]]]:
        """Each file's ranges by the engine (coalesced), the files side by side: a batch
        touches a shard a sample or so under the global shuffle, and one shard after
        another waited a mount's latency once a shard. ``paced``: one after another
        while quick (a page-cache read, ~70 us a shard: 40 threads handing the GIL round
        made a read of 64 samples 2x slower), side by side once reads prove slow, until
        quick again (:class:`Pace`); a shard's first read (its open, its offsets table,
        ~1 ms locally) and a compressed shard's whole file always go side by side, and
        do not count. The files' reads run on the pool the engine's own reads do not use
        (O_DIRECT's deep pool, pread's I/O pool), so no task waits on a task queued
        behind it.

        Each file's bytes are then checked to be the version listed (size, device,
        inode, mtime), as a local FileSource checks its fetches: a shard rewritten in
        place, or renamed over and then read by a worker's copy, was read as its new
        version beside the old one's samples."""
        reader = self._reader.get()
        files = self.files

        def one(f: int, idx: NDArray[np.intp]) -> tuple[NDArray[np.intp], Any]:
            path = files.name(f)
            try:
                got = reader.read(path, np.stack([begin[idx], length[idx]], axis=1))
            except FileNotFoundError as exc:
                raise gone_error(path, "MDS source", "listed") from exc
            files.check_listed(f, reader.file(path).fd)
            return idx, got

        if paced:
            return list(self._pace.map(lambda group: one(*group), groups))
        return list(pooled(lambda group: one(*group), groups, 0, self._pace.pool()))

    # -- compressed shards ----------------------------------------------------------

    def _groups(self, shards: list[int]) -> list[list[int]]:
        """``shards`` (in order) as the groups a read takes one after another: the
        uncompressed ones together, the compressed ones so that a group's decompressed
        bytes fit the cache (or are one shard)."""
        plain = [s for s in shards if not self.index.shards[s].codec]
        out = [plain] if plain else []
        cur: list[int] = []
        size = 0
        for s in shards:
            if not self.index.shards[s].codec:
                continue
            if cur and size + self._raw[s] > self.cache.max_bytes:
                out.append(cur)
                cur, size = [], 0
            cur.append(s)
            size += self._raw[s]
        return [*out, cur] if cur else out

    def _unzipped(self, shards: list[int]) -> dict[int, NDArray[np.uint8]]:
        """The decompressed bytes of the compressed ones of ``shards`` (held, or
        fetched and decompressed now, all at once)."""
        zipped = [s for s in shards if self.index.shards[s].codec]
        if not zipped:
            return {}
        return self.cache.get(zipped, self._unzip)

    def _unzip(self, shards: list[int]) -> list[NDArray[np.uint8]]:
        """Fetch ``shards``' stored files whole, side by side, then decompress and check
        them on the I/O pool (zstandard, zlib and bz2 release the GIL)."""
        sizes = np.array([self.files.sizes[self._file_of[s]] for s in shards], dtype=np.int64)
        stored = self._fetch(
            [(s, np.array([k])) for k, s in enumerate(shards)],
            np.zeros(len(shards), dtype=np.int64),
            sizes,
            len(shards),
            {},
            whole=True,
        )

        def one(s: int, data: NDArray[np.uint8]) -> NDArray[np.uint8]:
            shard, name = self.index.shards[s], self._name(s)
            assert shard.codec is not None and shard.raw_bytes is not None
            check_hashes(data, shard.hashes, name, "stored")
            raw = decompress(shard.codec, data, shard.raw_bytes, name)
            check_hashes(raw, shard.raw_hashes, name, "decompressed")
            return np.frombuffer(raw, np.uint8)

        if len(shards) == 1:
            out = [one(shards[0], stored[0])]
        else:
            from headrace.io._batch import results
            from headrace.io._pool import io_pool

            out = results(
                [io_pool().submit(one, s, d) for s, d in zip(shards, stored, strict=True)]
            )
        with self._lock:
            self.stats.unzipped += len(shards)
            self.stats.zip_bytes += int(sizes.sum())
            self.stats.unzipped_bytes += sum(o.nbytes for o in out)
        return out

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
            head = bytes(b[:12])
            if head[:2] == b"\xff\xd8" or (head[:4] == b"RIFF" and head[8:] == b"WEBP"):
                # MDSWriter stores bytes given as they are, and Streaming reads a png
                # column with PIL's Image.open, whatever format its bytes are.
                return decode_jpeg(b, name=where, mode=self._image_mode)
            return decode_png(b, name=where, mode=self._image_mode)
        return decode_ndarray(c, b, where)

    def _name(self, s: int) -> str:
        return self.files.name(self._file_of[s])

    def close(self) -> None:
        """Stop the read-ahead, close the request queue, the local reader and the object
        store, and drop the decompressed shards (offsets kept)."""
        self._ahead.stop()
        self._queue.close()  # a read-ahead's GETs in flight give up
        self._ahead.close()  # its thread ends (a load it began may have made a queue)
        self.cache.clear()
        self._queue.close()
        self._reader.close()
        self.files.close()

    def __getstate__(self) -> dict[str, Any]:
        # A worker's copy opens its own reader, store and cache (empty: decompressed
        # shards are not carried), from the index and listing read here: it neither
        # reads index.json nor lists the shards again.
        f = self.files
        return {
            "root": self.root,
            "args": self._args,
            "index": self.index,
            "listing": (f.keys, f.sizes, f.etags),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._build(state["root"], state["args"], (state["index"], state["listing"]))
