"""A Source of file samples (NPY, NPZ, JPEG, PNG, HDF5, tar, raw), local or on object storage.

Plan like map-style, fetch like iterable-style: the order is a global,
resumable permutation per epoch (:class:`FilePlan`), and the source runs
ahead along it with up to ``in_flight`` whole-file fetches held
(:class:`FetchWindow`). The loader's ``prefetch(seed, samples)`` queues the
next chunk's files as soon as the current chunk is read, so fetches for step
``t + 1`` overlap the decoding of step ``t``. Decoding runs on a small thread
pool: the JPEG, PNG and zlib decoders release the GIL for the heavy part.

``mode="map-style"`` is the baseline the seed describes: one fetch at a time,
then its decode, sample after sample in plan order. It reads the same samples
in the same order, so its batches are byte-identical to the default mode's.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import logging
import os
import secrets
import threading
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from headrace._closing import Closing
from headrace._messages import byte_size, some_of, unknown_keys
from headrace._warn import warn_user
from headrace.errors import ConfigError, DataError
from headrace.formats._file_config import RECORD_FORMATS, FileSourceConfig
from headrace.formats._file_counts import CountStats, resolve_counts
from headrace.formats._file_decode import FileDecoder, default_decode_threads
from headrace.formats._file_labels import file_classes
from headrace.formats._file_list import FileList, Listing, list_files
from headrace.formats._file_plan import FilePlan
from headrace.formats._file_rows import by_rows, rows_above
from headrace.formats._file_samples import Sample, stack_samples, zero_padding
from headrace.formats._file_window import FetchWindow, WindowStats
from headrace.formats._files import FileFormat, file_format, formats_by_extension
from headrace.formats._hdf5_ranges import RangedHdf5
from headrace.formats._image_slots import ImageSlots
from headrace.formats._images import IMAGE_FORMATS, PNG16_PART
from headrace.formats._npy_ranges import Held, RangedNpy
from headrace.formats._object_files import named_url, opened_at
from headrace.formats._tar import BrokenSample, TarIndex
from headrace.formats._tar_ranges import RangedTar, TarIndexes
from headrace.formats._tfrecord_ranges import RangedTfrecord
from headrace.io import CacheStats, ObjectCache, ObjectStats, open_cache
from headrace.io._gc_pause import gc_paused
from headrace.io._memory import available_memory
from headrace.io._mounts import any_on_network_fs
from headrace.plan import retry_rows

__all__ = ["FileSource"]

log = logging.getLogger("headrace")

DEFAULT_REMOTE_IN_FLIGHT = 64
DEFAULT_LOCAL_IN_FLIGHT = 16
#: What the default ``in_flight`` may hold: ``in_flight x largest file`` within it
#: (or within half the memory available, where that is less: :func:`held_budget`).
DEFAULT_HELD_BYTES = 4 << 30
#: The last sample number a read may ask for (sample numbers are int64).
_MAX_SAMPLE = 2**63 - 1
#: Each located sample's ``(file, item)``.
Located = tuple[NDArray[np.int64], NDArray[np.int64]]

#: The sources of this process by token (their copies in workers carry it), for the
#: corrupt files that workers relay (:func:`merge_corrupt_news`).
_BY_TOKEN: weakref.WeakValueDictionary[str, FileSource] = weakref.WeakValueDictionary()
#: A corrupt file a worker found: its name, why, and (a tar shard's broken samples, which
#: ``max_corrupt`` counts) the keys of those new since (none: every sample of it lost).
Found = tuple[str, ...]
#: Per source token, the corrupt files found since last taken, and the samples replaced.
CorruptNews = dict[str, tuple[list[Found], int]]
#: In a worker whose main process takes them (:func:`relay_corrupt`): its news.
_NEWS: CorruptNews | None = None
#: Held to note news and to take them: the loader's read-ahead thread notes them while the
#: thread handing batches over takes them (a file noted between the two steps of a take
#: went with neither, a replaced sample counted twice).
_NEWS_LOCK = threading.Lock()


def _new_news_lock() -> None:
    global _NEWS_LOCK
    _NEWS_LOCK = threading.Lock()  # a parent's thread may have held it at the fork


os.register_at_fork(after_in_child=_new_news_lock)


def relay_corrupt() -> None:
    """Keep this process's corrupt files for :func:`take_corrupt_news`, not logged here:
    a ``HeadraceDataLoader`` worker, or a stock ``DataLoader``'s over a ``TorchDataset``,
    whose main process merges them into its source (they stayed in the worker's copy: the
    main process's ``corrupt_files`` was empty, and ``replaced_samples`` 0, though files
    had been replaced). Again in the same process, nothing: news not yet taken stay."""
    global _NEWS
    with _NEWS_LOCK:
        if _NEWS is None:
            _NEWS = {}


def take_corrupt_news() -> CorruptNews:
    """The corrupt files and replaced samples found since the last call (empty where
    :func:`relay_corrupt` was not called)."""
    global _NEWS
    with _NEWS_LOCK:
        if not _NEWS:
            return {}
        news, _NEWS = _NEWS, {}
        return news


def relay_news(token: str, found: Found | None = None, replaced: int = 0) -> bool:
    """Note a corrupt file or replaced samples for :func:`take_corrupt_news`; ``False``
    where this process relays nothing (its own sources say them)."""
    if _NEWS is None:
        return False  # (set once, before this process reads)
    with _NEWS_LOCK:
        files, count = _NEWS.get(token, ([], 0))
        if found is not None:
            files.append(found)
        _NEWS[token] = (files, count + replaced)
        return True


def say_corrupt_news(news: CorruptNews) -> None:
    """In the worker that found them: :func:`take_corrupt_news` that no batch is left to
    carry to the main process (an iteration broken off or failed), logged here, as
    without a main process to take them."""
    for found, _ in news.values():
        for _, why, *_keys in found:
            log.warning("headrace: replacing the samples of a corrupt file: %s", why)


def merge_corrupt_news(news: CorruptNews) -> None:
    """In the main process: a worker's :func:`take_corrupt_news`, into the sources it
    came from (logged, and counted against ``max_corrupt``, as without workers: a tar
    shard's broken samples by their keys, so one that two workers met counts once)."""
    for token, (found, replaced) in news.items():
        src = _BY_TOKEN.get(token)
        if src is None:
            continue  # the source is gone here (closed and freed)
        src.replaced_samples += replaced
        for name, why, *keys in found:
            src._note_corrupt_named(name, why, keys=keys, whole=src._whole_of(name, keys))


def held_words() -> str:
    """:func:`held_budget` in words, saying when memory bound it."""
    held = held_budget()
    bound = ": half the memory available" if held < DEFAULT_HELD_BYTES else ""
    return f"{byte_size(held)} at most{bound}"


def held_budget() -> int:
    """What the default read-ahead may hold: :data:`DEFAULT_HELD_BYTES`, or half the
    memory available where that is less (a container limited to 4 GiB held 4 GiB of
    files before its first sample, on top of the run)."""
    memory = available_memory()
    if memory is None:
        return DEFAULT_HELD_BYTES
    return max(1, min(DEFAULT_HELD_BYTES, memory.available // 2))


class FileSource(Closing):
    """Samples of a dataset of files, by global sample number (a :class:`Source`).

    ``files``: a local directory (every file with the format's extension,
    recursively, through symbolic links), a glob pattern or an iterable of local
    paths (and patterns), an object-store URL prefix or glob, or a list of object URLs
    (and globs) in one bucket (``s3://bucket/prefix``; ``store_options`` go to
    :class:`headrace.io.ObjectStore`). Options are :class:`FileSourceConfig`
    fields, or pass ``config``.
    """

    def __init__(
        self,
        files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        config: FileSourceConfig | None = None,
        store_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        if isinstance(files, bytes):  # a path as bytes, not a list of byte values
            files = os.fsdecode(files)
        elif not isinstance(files, (str, os.PathLike)):
            files = list(files)  # a generator is read once, and kept to pickle for workers
        unnamed = config is None and "format" not in options  # raw by default, not chosen
        if config is None:
            known = {f.name for f in dataclasses.fields(FileSourceConfig)}
            unknown = sorted(set(options) - known)
            if unknown:
                raise ConfigError(
                    unknown_keys(
                        "FileSource",
                        unknown,
                        known,
                        "besides store_options and config it takes",
                        "option",
                    )
                )
            config = FileSourceConfig(**options)
        elif options:
            raise ConfigError(f"pass options or config, not both (got {sorted(options)}).")
        self._token = secrets.token_hex(8)  # its copies' corrupt files come back by it
        _BY_TOKEN[self._token] = self
        self._open(files, config, store_options, None, None)
        if unnamed and config.decode:
            self._refuse_unnamed_raw()

    def _refuse_unnamed_raw(self) -> None:
        """Refuse the default ``format="raw"`` over files of a known format: a folder of
        ``.npy`` files read as bytes, headers and all, until 2026-12-03."""
        found = formats_by_extension(self.files.keys)
        if not found:
            return
        self.close()
        fmts = sorted(found, key=lambda f: -found[f])
        held = " and ".join(f"{found[f]:,}{' of them' * (f == fmts[0])} are {f}" for f in fmts)
        raise ConfigError(
            f"{self.files.url or 'a list of paths'}: no format was given, so its "
            f"{len(self.files):,} files would be read as raw bytes (format='raw', the "
            f"default), but {held} files: pass "
            + " or ".join(f"format={f!r}" for f in fmts)
            + " to decode them, or format='raw' to read their bytes"
        )

    def _open(
        self,
        files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        config: FileSourceConfig,
        store_options: Mapping[str, Any] | None,
        listing: Listing | None,
        counts: NDArray[np.int64] | None,
        carried: Held | dict[int, bytes] | None = None,
        listed_at: str | None = None,
        tar_held: list[tuple[int, TarIndex]] | None = None,
        labels_held: tuple[tuple[str, ...], NDArray[np.int32]] | None = None,
    ) -> None:
        self._args = (files, config, dict(store_options or {}))
        self.config = config
        # What this source's parts call back through: not ``self``, whose bound methods and
        # closures held there made a reference cycle, so a source dropped without close()
        # (its loader's too) kept its fetch and decode threads until the cyclic collector
        # ran, never under gc.disable() (18 threads a source, without bound).
        me = weakref.proxy(self)
        self.format: FileFormat = file_format(config.format)
        cache = open_cache(config.cache_dir, config.cache_bytes)
        self.files: FileList = self._list(listing, cache, listed_at)
        #: The class names and each file's class number (``labels=``; else None).
        self.classes: tuple[str, ...] | None = None
        self.file_labels: NDArray[np.int32] | None = None
        if labels_held is not None:  # a copy's: the parent's (its labels= not sent)
            self.classes, self.file_labels = labels_held
        elif config.labels is not None:
            try:
                self.classes, self.file_labels = self._file_classes()
            except BaseException:
                self.files.close()
                raise
        if self.files.hidden or self.files.special or self.files.other:  # said, not only in a repr
            log.warning("%s: %s", self.files.url or "a list of paths", self.files.skipped())
        self._far: bool | None = None  # each read a round trip (see _round_trips)
        spf = config.samples_per_file
        #: What reading the files' headers cost (``samples_per_file="header"``; else None).
        self.count_stats: CountStats | None = None
        heads: dict[int, bytes] = {}  # NPY headers the count read, for the reads by rows
        # Tar shards' indexes (the count's walks, kept for the reads), else None.
        cut = config.on_corrupt == "replace"  # (a shard cut short: its whole samples read)
        self._indexes = TarIndexes(cut) if self.format.name == "tar" else None
        if self._indexes is not None:
            self._indexes.take(tar_held or [])  # a worker's copy: its parent's walks
        # Files whose header is damaged, under on_corrupt="replace": counted 0, noted below
        # (tar shards where samples lack a field asked: counted whole, those replaced).
        bad_heads: dict[int, DataError] | None = {} if config.on_corrupt == "replace" else None
        if counts is None:  # a worker's copy carries its parent's counts: none read again
            counts, self.count_stats = resolve_counts(
                spf,
                files,
                self.files,
                self.format,
                config.datasets,
                config.in_flight or self._default_depth(),
                heads,
                self._indexes,
                corrupt=bad_heads,
            )
        if counts is None and self.format.name == "tar":
            # A shard's samples are rows whatever samples_per_file=N says: counted, so
            # one of 1 is row 0 too (and a shard not holding N is refused by name).
            counts = np.full(len(self.files), spf, dtype=np.int64)
        self.corrupt_files: dict[str, str] = {}  # name -> why, as this process found them
        #: A tar dataset's broken samples, as this process found them: {shard: keys}.
        self.broken_samples: dict[str, list[str]] = {}
        # The files whose every sample this process found unreadable (see _replace).
        self._unreadable: set[str] = set()
        # A tar dataset's max_corrupt counts samples (see _count_lost).
        self._shard_counts = counts if self.format.name == "tar" else None
        # A shard's samples on average (those counted 0 left out): what one whose count is
        # unknown counts as (left out at open; the rest of one cut short); and the
        # shards' samples, a mean shard's for each counted 0.
        self._shard_mean = self._shard_total = 0
        if counts is not None and self._shard_counts is not None:
            held = int(np.count_nonzero(counts))
            self._shard_mean = max(1, round(int(counts.sum()) / max(1, held)))
            self._shard_total = int(counts.sum()) + self._shard_mean * (len(counts) - held)
        self._lost_by: dict[str, int] = {}  # samples lost, by shard
        self._lost = 0
        self._whole: dict[str, int] = {}  # shards whose every sample is lost: how many
        self._cut: dict[str, int] = {}  # shards cut short: the samples lost after the cut
        self._file_of: dict[str, int] | None = None  # each file's number, by name
        try:
            for f, err in sorted((bad_heads or {}).items()):
                # Counted 0: none of it planned (a tar shard of broken samples: counted
                # whole, those replaced when read).
                self._note_corrupt(f, err, left_out=not isinstance(err, BrokenSample))
        except DataError:
            self.files.close()
            raise
        self.counted = counts is not None
        if counts is not None and len(counts) and not np.any(counts):
            self.files.close()
            said = "their headers say" if spf == "header" else "samples_per_file says"
            raise ConfigError(
                f"{self.files.url or 'the list of files'}: its {len(self.files):,} "
                f"{self.format.name} file(s) hold no sample (every count is 0, as {said}): "
                "empty files, or not the files meant?"
            )
        self.plan = FilePlan(
            num_files=len(self.files),
            samples_per_file=spf if isinstance(spf, int) else 1,
            shuffle=config.shuffle,
            counts=counts,
        )
        # Items are rows of the files' leading axis (else each file is one sample).
        self._rows = self.counted or self.plan.samples_per_file > 1
        # Reads decode only the samples they ask of each file (see _rows_wanted).
        fmt = self.format.name
        # NPY and NPZ files read by rows under shuffle="samples" (see _file_rows).
        self._rows_above = rows_above(config, self.files, self._rows, self._round_trips)
        self._rows_only = bool(
            self._rows
            and (config.decode or fmt in RECORD_FORMATS)  # decode=False: records' bytes
            and (
                (fmt in ("hdf5", "tar", *RECORD_FORMATS) and config.on_corrupt == "raise")
                or fmt == "npz"
                or self._rows_above is not None
            )
        )
        self.in_flight = config.in_flight or self._default_in_flight()
        if config.in_flight and listing is None:  # given, and not a worker's copy
            self._warn_held()
        self._by_rows = by_rows(
            config,
            lambda: me.files,
            self.in_flight,
            self._rows_above,
            heads,
            self.plan.count,
            self._indexes,
        )
        if carried and isinstance(self._by_rows, RangedNpy):
            self._by_rows.take_held(cast(Held, carried))  # a worker's copy: its parent's headers
        elif carried and isinstance(self._by_rows, RangedTfrecord):
            self._by_rows.seed(cast(dict[int, bytes], carried))  # its parent's record indexes
        above = self._ranges_above()
        self._ranged = (
            None
            if above is None
            else RangedHdf5(lambda: me.files, config.datasets or (), self.in_flight, above)
        )
        # The samples asked of each file planned (HDF5 by ranges: what its fetch reads).
        self._wanted: dict[int, NDArray[np.int64]] = {}
        depth = 1 if config.mode == "map-style" else self.in_flight
        # Through the source, not bound to this listing's store: close() closes that
        # store, and the next read opens another (see reopen).
        self.window = FetchWindow(lambda f: me._fetch_file(f), depth)
        threads = config.decode_threads
        self.decode_threads = default_decode_threads() if threads is None else threads
        self.decoder = FileDecoder(
            config=config,
            format=self.format,
            plan=self.plan,
            window=self.window,
            name=lambda f: me.files.name(f),
            counted=self.counted,
            rows=self._rows,
            threads=self.decode_threads,
            tar_indexes=self._indexes,
            fetch=lambda f: me._fetch_apart(f),  # (through the source: see reopen)
            recheck=lambda f: me._recheck(f),
        )
        self._prefetched: set[int] = set()
        self._per_sample: NDArray[np.float64] | None = None  # bytes of a sample, by file
        # The samples the loader said follow the next read (None: not told).
        self._following: tuple[int, NDArray[np.int64]] | None = None
        # (seed, samples, files, items) of the last few locates (see _locate).
        self._located: deque[tuple[int, NDArray[np.int64], Located]] = deque(maxlen=3)
        self.replaced_samples = 0

    def __repr__(self) -> str:
        c = self.config
        skipped = self.files.skipped()
        classes = "" if self.classes is None else f", labels of {len(self.classes):,} classes"
        return (
            f"FileSource({self.files.url or 'a list of paths'!r}, {len(self.files):,} "
            f"{self.format.name} file(s), {self.samples_per_epoch:,} samples an epoch, "
            f"shuffle={c.shuffle!r}{classes}{'; ' + skipped if skipped else ''})"
        )

    @property
    def counts(self) -> NDArray[np.int64]:
        """The samples of each file, in the order of ``files.keys`` (read-only)."""
        if self.plan.counts is not None:
            return cast(NDArray[np.int64], self.plan.counts)
        out = np.full(len(self.files), self.plan.samples_per_file, dtype=np.int64)
        out.setflags(write=False)
        return out

    def file_item(self, index: Any) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(file, item)`` of a batch's ``index`` values: sample ``index`` is row ``item``
        of file ``files.keys[file]`` (the whole file when it holds one sample)."""
        return self.plan.file_item(np.asarray(index, dtype=np.int64))

    def sample_keys(self, index: Any) -> list[str]:
        """The name of each sample of a batch's ``index`` values: a tar sample's
        WebDataset key (``__key__``: the member names' part before the first dot of
        their base names); the file's key where a file is one sample; else
        ``key[item]``. A tar shard's key comes from its index (kept from the count's
        walk or a read; else its headers are walked now, a read a member)."""
        files, items = self.file_item(index)
        keys = self.files.keys
        if self._indexes is None:
            if not self._rows:
                return [keys[f] for f in files.tolist()]
            return [f"{keys[f]}[{i}]" for f, i in zip(files.tolist(), items.tolist(), strict=True)]
        walker = self._by_rows if isinstance(self._by_rows, RangedTar) else None
        own = walker is None
        if walker is None:
            walker = RangedTar(lambda: self.files, (), 1, self._indexes)
        try:
            out = []
            for f, i in zip(files.tolist(), items.tolist(), strict=True):
                index_f = self._indexes.get(f) or walker.image(f, None).index
                assert index_f is not None
                out.append(index_f.key(i))
            return out
        finally:
            if own:
                walker.close()

    # -- the Source protocol -------------------------------------------------------
    def fingerprint(self) -> dict[str, Any]:
        c = self.config
        keys = list(self.files.keys)  # (a list: the digest is of its JSON)
        if not self.files.url and keys:  # a list of paths: names below their common folder
            full = [os.path.abspath(k) for k in keys]  # (given relative, absolute or both)
            cut = len(os.path.commonpath([os.path.dirname(k) for k in full]).rstrip(os.sep)) + 1
            keys = [k[cut:] for k in full]
        # Names, not the place (no url): a copy moved to another folder, mount or bucket
        # is the same data and resumes, as for token, row and table sources.
        out = {
            "kind": "files",
            "keys": keys,
            "sizes": list(self.files.sizes),
            "format": self.format.name,
            "samples_per_file": self._counts_part(),
            "shuffle": c.shuffle,
            "decode": c.decode,
            "datasets": list(c.datasets or ()),
        }
        # Only where it changes the pixels: states saved before image_mode existed (and
        # so with the format's own pixels) still load, and "RGB" is a JPEG's default (and
        # format="image"'s).
        if c.image_mode is not None and not (
            self.format.name in ("jpeg", "image") and c.image_mode == "RGB"
        ):
            out["image_mode"] = c.image_mode
        if c.exif_transpose:  # turned pixels: not the data a run without it read
            out["exif_transpose"] = True
        if self.format.name == "png" and c.decode and c.image_mode is None:
            out.update(PNG16_PART)
        if self.classes is not None:  # batches with labels: not the data a run without read
            out["classes"] = list(self.classes)
            # Each file's class (a mapping's, which the names do not say), as a digest.
            assert self.file_labels is not None
            out["file_labels"] = hashlib.sha256(self.file_labels.tobytes()).hexdigest()
        return out

    def _counts_part(self) -> int | list[int]:
        """``samples_per_file`` as the fingerprint holds it: the counts (read or given),
        or one integer where every file holds the same number >= 2, which plans and
        reads exactly as that fixed ``samples_per_file``, so either resumes the other."""
        counts = self.plan.counts
        if counts is None:
            return self.plan.samples_per_file
        first = int(counts[0])
        if first >= 2 and bool((np.asarray(counts) == first).all()):
            return first
        return [int(c) for c in counts]

    @property
    def replaces(self) -> str | None:
        """Why an exact pass (``Loader(epochs=)``) would see a sample twice (None: it would not)."""
        if self.config.on_corrupt != "replace":
            return None
        return (
            "FileSource replaces the samples of a file that does not decode by others "
            "(on_corrupt='replace'), which an exact pass would then count twice; make it "
            "with on_corrupt='raise' (the default)"
        )

    @property
    def samples_per_epoch(self) -> int:
        return self.plan.samples_per_epoch

    @property
    def stats(self) -> WindowStats:
        return self.window.stats

    @property
    def object_stats(self) -> ObjectStats | None:
        """GETs, bytes, retries and latencies of the files on object storage (``None``
        when local), as token, row and table sources give theirs."""
        return None if self.files.store is None else self.files.store.stats

    @property
    def cache_stats(self) -> CacheStats | None:
        """What the object cache did in this process (``None`` without ``cache_dir``)."""
        return None if self.files.cache is None else self.files.cache.stats

    def _round_trips(self) -> bool:
        """Whether each read is a round trip: object storage, or a file on a network or
        FUSE mount (asked once: it looks up the mount of every file)."""
        if self._far is None:
            f = self.files
            self._far = f.remote or any_on_network_fs(f.name(i) for i in range(len(f)))
        return self._far

    def _default_depth(self) -> int:
        """64 where each read is a round trip (object stores, network and FUSE mounts:
        measured 3x 16 on a 20 ms mount), 16 when every file is on a local disk."""
        return DEFAULT_REMOTE_IN_FLIGHT if self._round_trips() else DEFAULT_LOCAL_IN_FLIGHT

    def _default_in_flight(self) -> int:
        """:meth:`_default_depth`, or fewer (2 at least) where that many of the largest
        file would hold over ``DEFAULT_HELD_BYTES``: the window holds whole files, and
        64 HDF5 shards of 1 GiB are 64 GiB before a sample is read."""
        depth = self._default_depth()
        largest = self._largest_whole()
        return max(2, min(depth, held_budget() // largest)) if largest else depth

    def _largest_whole(self) -> int:
        """The size of the largest file read whole (one read by ranges is held as what
        its reads need), 0 where there is none."""
        above = self._rows_above if self._rows_above is not None else self._ranges_above()
        sizes = self.files.sizes.array
        sizes = sizes if above is None else sizes[sizes < above]
        return int(sizes.max()) if len(sizes) else 0

    def _warn_held(self) -> None:
        """Warn where the ``in_flight`` given would hold more of the largest file than
        the machine has memory: a run that fills its window is killed by the kernel's
        out-of-memory killer, without a word, maybe an hour in."""
        largest = self._largest_whole()
        memory = available_memory()
        if memory is None or self.in_flight * largest <= memory.available:
            return
        free = memory.available
        fit = max(1, free // (2 * largest))
        warn_user(
            f"FileSource: in_flight={self.in_flight} whole files of up to "
            f"{byte_size(largest)} may hold {byte_size(self.in_flight * largest)}, more than "
            f"the {byte_size(free)} of memory available here ({memory.which()}): a run "
            "that fills its read-ahead "
            f"is killed by the kernel without a word; give in_flight={fit} or less, or leave "
            f"it out (the default holds {held_words()})",
            RuntimeWarning,
        )

    def _ranges_above(self) -> int | None:
        """The size from which files are read by ranges, ``None`` where none is: HDF5
        files of several samples whose reads decode only the samples asked
        (:meth:`_rows_wanted`; map-style, the baseline, fetches whole files), on object
        storage (``hdf5_ranges_above``) or, under ``shuffle="samples"``, local
        (``hdf5_local_ranges_above``)."""
        c = self.config
        hdf5 = self.format.name == "hdf5"
        if not (hdf5 and self._rows_only and c.mode == "headrace"):
            return None
        if not self.files.remote:  # a file's samples in runs ("files"): one pread serves them
            return c.hdf5_local_ranges_above if c.shuffle == "samples" else None
        return c.hdf5_ranges_above

    def _fetch_file(self, f: int) -> Any:
        """File ``f``'s bytes, checked against the listed size (see :class:`FileList`);
        or, read by ranges, a sparse image holding what the reads planned need (an NPZ
        object whose members read are kept inflated: those, see :class:`~._npz.Inflated`)."""
        # An NPZ whose members read are all kept inflated: none of its bytes is needed
        # (the version listed, as inflated; a local file's stat checks it still is).
        kept = self.decoder.kept_members(f)
        if kept is not None:
            if not self.files.remote:
                self.files.check_unread(f)
            self._wanted.pop(f, None)
            return kept
        # The rows noted are this fetch's: left noted, a later fetch of the file (the
        # next chunk's prefetch) fetched them again with its own.
        if self._by_rows is not None and self._by_rows.applies(f):
            return self._by_rows.image(f, self._wanted.pop(f, None))
        if self._ranged is None:
            return self.files.fetch(f)
        if self._ranged.applies(f):
            return self._ranged.image(f, self._wanted.pop(f, None))
        if not self.files.remote:
            return self.files.fetch(f)
        # A place on the ranges' queue: fetches of whole files beside GETs of ranges
        # were up to twice in_flight GETs at once where files straddle the threshold.
        with self._ranged.slot():
            return self.files.fetch(f)

    def _fetch_apart(self, f: int) -> Any:
        """File ``f`` read apart from the window (the decoder's first file): whole, or
        where it is read by records, its record image, whose decode of record 0 fetches
        that record alone (each process fetched the first shard whole to learn the kind
        of list each feature is, see :meth:`FileDecoder._first_kinds`)."""
        if isinstance(self._by_rows, RangedTfrecord) and self._by_rows.applies(f):
            return self._by_rows.image(f, None)
        return self.files.fetch(f)

    def _recheck(self, f: int) -> None:
        """Refuse local file ``f`` unless it is still the version listed, by a stat (what
        a read kept of it serves the next: see :meth:`FileList.check_unread`). An object's
        bytes kept were checked against the ETag listed; a HEAD a read to check it again
        is not made."""
        if not self.files.remote:
            self.files.check_unread(f)

    def _note_rows(self, files: NDArray[np.int64], items: NDArray[np.int64]) -> None:
        """Note the samples asked of files to be fetched (read by ranges: their chunks)."""
        if self._ranged is not None or self._by_rows is not None:
            held = self.window.held()
            for f, rows in (self._rows_wanted(files, items) or {}).items():
                if f in held:  # fetched or fetching: the decode fetches what it lacks
                    continue
                # Both reads' rows where a file is in this one and the next: the first
                # fetch serves both, rather than the decode fetching what it missed.
                old = self._wanted.get(f)
                self._wanted[f] = rows if old is None else np.union1d(old, rows)

    def reopen(self) -> None:
        """Open the object store again if :meth:`close` closed it (a no-op otherwise).

        Reads call it: a source closed by one loader (as every epoch of a
        ``TorchDataset`` closes its loader) reads on under the next one, as token,
        row and table sources do. The listing is kept: the files are the ones listed.
        """
        f = self.files
        if not (f.remote and f.store is not None and f.store.closed):
            return
        self.files = self._list((f.keys, f.sizes, f.etags), f.cache, f.url)

    def _list(
        self, listing: Listing | None, cache: ObjectCache | None, listed_at: str | None = None
    ) -> FileList:
        """The files as given (``listing``: as listed already, not listed again, its
        object keys under ``listed_at``)."""
        files, config, store_options = self._args
        with gc_paused():  # a listing's objects are kept: no garbage to look for
            return list_files(
                files,
                extensions=self.format.extensions,
                local_read=config.local_read,
                store_options=store_options,
                listing=listing,
                cache=cache,
                listed_at=listed_at,
            )

    @property
    def ragged_keys(self) -> tuple[str, ...]:
        """The batch keys whose samples may differ in shape (a Mixture gives them per
        sample where its sources' sizes differ): every array a file gives, since files
        may differ (images, NPZ members, HDF5 datasets); an NPZ's members without
        ``datasets=`` are known once a file is decoded, before the Mixture compares."""
        if self.decoder.keys is not None:
            return tuple(self.decoder.keys)
        c = self.config
        if not c.decode:
            return ("bytes",)
        if self.format.name in IMAGE_FORMATS:
            return ("image",)
        return tuple(c.datasets) if c.datasets else ("data",)

    def read(self, seed: int, samples: NDArray[np.int64]) -> dict[str, NDArray[Any]]:
        self.reopen()
        samples = np.asarray(samples, dtype=np.int64)
        files, items = self._locate(seed, samples)
        index = self.plan.index(files, items)
        pairs = zip(files.tolist(), items.tolist(), strict=True)
        slots = None
        d = self.decoder
        if self.config.mode == "map-style":
            picked = [d.decode_one(f, self._take_one(f), i) for f, i in pairs]
        elif len(samples) == 0:  # a mixture's layout check: the read-ahead is left as it is
            picked = []
        else:
            order = list(dict.fromkeys(files.tolist()))
            need = set(order)
            # Read-ahead from a prefetch for *these* samples is kept; one for other samples
            # (a jump, a resume, random access) is dropped so it cannot hold slots.
            upcoming = self.window.queued if need <= self._prefetched else []
            self._prefetched = set()
            self.window.retain(need | set(upcoming))
            if self._ranged is not None or self._by_rows is not None:
                old = self._wanted
                self._wanted = {f: old[f] for f in upcoming if f in old}
                self._note_rows(files, items)
            ahead = [f for f in upcoming if f not in need]
            if not ahead:
                ahead = self._next_files(seed, samples, need, order[-1])
            self.window.plan(order + ahead)
            if self.config.decode and self.format.name in IMAGE_FORMATS and not self._rows:
                # One image per file: each file's image goes to the slot of its first sample.
                slots = ImageSlots(len(samples))
                at = {f: k for k, f in reversed(list(enumerate(files.tolist())))}
                decoded = d.fetch_and_decode(order, (slots, at))
                picked = [d.pick_checked(decoded[f], f, i) for f, i in pairs]
            else:
                want = self._rows_wanted(files, items)
                decoded = d.fetch_and_decode(order, rows=want)
                gathered = d.gather(decoded, files, items, want)
                if gathered is not None:
                    self._count_read(files, self.window.stats)
                    kept = {k: zero_padding(v) for k, v in gathered.items()}
                    return self.labelled({"index": index, **kept})
                picked = [
                    d.pick_checked(decoded[f], f, i, rows=None if want is None else want[f])
                    for f, i in pairs
                ]
        self._count_read(files, self.window.stats)
        bad = [k for k, s in enumerate(picked) if isinstance(s, DataError)]
        if bad:
            self._replace(seed, samples, index, picked, bad)
        into = {"image": slots} if slots is not None else None
        # (No error is left in picked; index names the samples delivered, replacements too.)
        batch = stack_samples(
            cast(list[Sample], picked), index, into, where=self.files.url or "the files"
        )
        return self.labelled(batch)

    def _file_classes(self) -> tuple[tuple[str, ...], NDArray[np.int32]]:
        """The classes and each file's class number (``labels=``)."""
        f, c = self.files, self.config
        assert c.labels is not None
        if f.rooted:
            keys: Sequence[str] = f.keys
        elif isinstance(c.labels, dict):  # the names as listed
            keys = [f"{f.url}/{k}" for k in f.keys] if f.url else f.keys
        else:  # full names: the folder holding a file is its class
            keys = [f"{f.url}/{k}" if f.url else os.path.abspath(k) for k in f.keys]
        labels = cast("str | dict[str, str]", c.labels)  # (a mapping kept as a dict)
        classes = cast("tuple[str, ...] | None", c.classes)  # (a list kept as a tuple)
        return file_classes(
            keys,
            rooted=f.rooted,
            where=f.url,
            labels=labels,
            classes=classes,
            folders=f.folders,
            other=f.other_said,
            listed=f.beside,
        )

    def labelled(self, batch: dict[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
        """``batch`` with each sample's class as ``label`` (``labels=``; else as it is)."""
        if self.file_labels is None:
            return batch
        if "label" in batch:
            raise DataError(
                f"{self.files.url or 'the files'}: labels= adds each sample's class as "
                "'label', but the files hold a 'label' of their own: read theirs (leave "
                "labels= out), or name the others with datasets=(...)"
            )
        files = self.plan.file_item(batch["index"])[0]
        batch["label"] = self.file_labels[files].astype(np.int64)
        return batch

    def _count_read(self, files: NDArray[np.int64], st: WindowStats) -> None:
        """Count in ``st`` samples read from ``files`` (one entry a sample), and the bytes
        they take in their files (``stats.amplification``: each file's size over its count)."""
        if not len(files):
            return
        if self._per_sample is None:
            sizes = np.asarray(self.files.sizes, dtype=np.float64)
            self._per_sample = sizes / np.maximum(self.counts, 1)
        st.samples += len(files)
        st.sample_bytes += round(float(self._per_sample[files].sum()))

    def followed_by(self, seed: int, samples: NDArray[np.int64]) -> None:
        """The next read will be followed by one of ``samples`` (none: by nothing)."""
        self._following = (seed, np.asarray(samples, dtype=np.int64))

    def _locate(self, seed: int, samples: NDArray[np.int64]) -> Located:
        """``plan.locate(seed, samples)``, read-only, remembered for the last few calls:
        a chunk's samples are located three times (by the read before it, for its next
        files; by the loader's prefetch; by its own read), ~14% of the loader's Python
        for NPY files read by rows."""
        for s, got, located in self._located:
            if s == seed and len(got) == len(samples) and np.array_equal(got, samples):
                return located
        files, items = self.plan.locate(seed, samples)
        files.setflags(write=False)
        items.setflags(write=False)
        self._located.append((seed, samples.copy(), (files, items)))
        return files, items

    def _next_files(
        self, seed: int, samples: NDArray[np.int64], need: set[int], last: int
    ) -> list[int]:
        """The files the read after this one needs, to fetch while this one waits.

        The loader names the next chunk only after this one is read; without them
        the window would drain at the end of every chunk (``last``: this read's last
        file, which the decoder keeps for the next read). Told by the loader
        (:meth:`followed_by`), they are known; else, after a contiguous run of
        samples, the run right after it is a guess. A wrong guess costs fetches,
        never results: :meth:`read` drops read-ahead it was not asked for.
        """
        told, self._following = self._following, None
        if told is not None and told[0] == seed:
            nxt = told[1]
        else:
            n = len(samples)
            if n == 0 or int(samples[-1]) - int(samples[0]) + 1 != n or not self.config.speculate:
                return []
            if int(samples[-1]) + n > _MAX_SAMPLE:
                # The run after it passes the last int64 sample number: no read asks for
                # it, and ``samples + n`` wrapped negative, which locate() refused, failing
                # this read (of valid samples) with "sample numbers must be >= 0".
                return []
            nxt = samples + n
        if len(nxt) == 0:
            return []
        files, items = self._locate(seed, nxt)
        # The next read's rows join this read's fetch only where the file stays held
        # until then: one not in this read (fetched ahead), or this read's last file
        # (the decoder keeps it). Any other is released once decoded, and the next read
        # fetched those rows again (HDF5 and NPY by ranges, 4 files in every read: an
        # epoch fetched 2.0x its rows' bytes, see test_an_epoch_by_ranges_fetches_each_row_once).
        stays = ~np.isin(files, np.fromiter(need, np.int64, len(need))) | (files == last)
        self._note_rows(files[stays], items[stays])
        return [f for f in dict.fromkeys(files.tolist()) if f not in need]

    def prefetch(self, seed: int, samples: NDArray[np.int64]) -> None:
        """Queue the files these samples need; start as many fetches as the window allows."""
        if self.config.mode == "map-style":
            return  # the baseline fetches one file at a time, when asked
        self.reopen()
        files, items = self._locate(seed, np.asarray(samples, dtype=np.int64))
        self._note_rows(files, items)
        order = dict.fromkeys(files.tolist())
        self._prefetched = set(order)
        self.window.plan(order)

    def _rows_wanted(
        self, files: NDArray[np.int64], items: NDArray[np.int64]
    ) -> dict[int, NDArray[np.int64]] | None:
        """The samples a read asks of each file (increasing), where only those are
        decoded: HDF5 files, tar, TFRecord and ArrayRecord shards of several samples
        under ``on_corrupt="raise"``, and NPZ
        files of several samples (a deflated member is inflated whole and checked, so
        a file is judged whole there under any ``on_corrupt``; only those rows are kept).

        A 2,000-slice volume was decoded whole for each read that wanted a few of its
        slices (``shuffle="samples"``: a whole file per sample). Under ``"replace"``
        a file is judged whole, its damage found wherever it lies, so that every read
        order, chunk size and worker replaces the same samples: it stays whole there.
        """
        if not self._rows_only:
            return None
        if not len(files):  # (np.split of nothing is one empty group, not none)
            return {}
        order = np.lexsort((items, files))
        fs, its = files[order], items[order]
        # Repeats dropped once for all files (np.unique a file cost ~20 us each).
        new = np.empty(len(fs), dtype=bool)
        new[0] = True
        np.not_equal(its[1:], its[:-1], out=new[1:])
        new[1:] |= fs[1:] != fs[:-1]
        fs, its = fs[new], its[new]
        cuts = np.flatnonzero(np.diff(fs)) + 1
        return {int(f[0]): i for f, i in zip(np.split(fs, cuts), np.split(its, cuts), strict=True)}

    # -- reading -------------------------------------------------------------------
    def _take_one(self, f: int) -> Any:
        """One file's bytes through the window, its slot freed at once (map-style)."""
        try:
            return self.window.take(f)
        finally:
            self.window.release(f)

    def _replace(
        self,
        seed: int,
        samples: NDArray[np.int64],
        index: NDArray[np.int64],
        picked: list[Sample | DataError],
        bad: list[int],
    ) -> None:
        """Replace the samples at ``bad`` (their files did not decode), in rounds.

        A sample's ``a``-th replacement is dataset sample ``retry_rows(seed,
        sample, a)``: a pure function, so every host, worker and mode replaces
        the same sample by the same one. Replacements are read directly (not
        through the read-ahead window), one file at a time: they are rare.
        ``index`` is updated to the samples actually delivered.
        """
        n = self.plan.samples_per_epoch
        for k in bad:
            err = picked[k]
            assert isinstance(err, DataError)
            self._note_corrupt(int(self.plan.file_item(index[k])[0]), err)
        todo = bad
        tried: dict[int, list[str]] = {k: [] for k in bad}
        for attempt in range(1, self.config.max_retries + 1):
            chosen = retry_rows(seed, samples[todo], attempt, n).tolist()
            left = []
            for k, r in zip(todo, chosen, strict=True):
                f, item = (int(x) for x in self.plan.file_item(np.int64(r)))
                name = self.files.name(f)
                got: Sample | DataError
                if name in self._unreadable:
                    got = DataError(self.corrupt_files[name])
                else:
                    got = self.decoder.decode_one(f, self.files.fetch(f), item)
                if isinstance(got, DataError):
                    self._note_corrupt(f, got)
                    tried[k].append(name)
                    left.append(k)
                    continue
                picked[k], index[k] = got, r
                self.replaced_samples += 1
                relay_news(self._token, replaced=1)
            todo = left
            if not todo:
                return
        k = todo[0]
        name = self.files.name(int(self.plan.file_item(index[k])[0]))
        raise DataError(
            f"{self.files.url or 'the files'}: sample {int(samples[k])} ({name} is corrupt) "
            "found no readable replacement in max_retries="
            f"{self.config.max_retries} tries (tried {', '.join(tried[k])})"
            + (f"; {len(todo) - 1} more samples of this batch too" if len(todo) > 1 else "")
            + f"; it did not decode: {self.corrupt_files[name]}"
        )

    def _note_corrupt(self, f: int, err: DataError, left_out: bool = False) -> None:
        """Note file ``f`` corrupt (see :meth:`_note_corrupt_named`); where ``err`` is not
        a :class:`BrokenSample` (one sample of a tar shard), it holds no readable sample:
        a replacement that lands in it is not decoded again (a shard of one broken
        sample must not be: a process that had met it then rejected its readable
        samples as replacements, where one that had not took them)."""
        broken = isinstance(err, BrokenSample)
        name = self.files.name(f)
        if not broken:
            self._unreadable.add(name)
        keys = err.keys if isinstance(err, BrokenSample) else ()
        cut = 0
        if isinstance(err, BrokenSample) and err.cut and self._shard_counts is not None:
            cut = max(1, self._shard_mean - int(self._shard_counts[f]))
        whole = 0 if broken else self._whole_of(name, (), f)
        self._note_corrupt_named(name, str(err), left_out, keys=keys, whole=whole, cut=cut)

    def _whole_of(self, name: str, keys: Sequence[str], f: int | None = None) -> int:
        """The samples lost where tar shard ``name`` (file ``f``) is lost whole (news of no
        broken sample ``keys``): its count, a mean shard's where counted 0; 0 where not tar
        or ``keys`` are given."""
        counts = self._shard_counts
        if counts is None or keys:
            return 0
        if f is None:
            if self._file_of is None:
                self._file_of = {self.files.name(i): i for i in range(len(self.files))}
            f = self._file_of.get(name)
        n = 0 if f is None else int(counts[f])
        return n or self._shard_mean

    def _note_corrupt_named(
        self,
        name: str,
        why: str,
        left_out: bool = False,
        keys: Sequence[str] = (),
        whole: int = 0,
        cut: int = 0,
    ) -> None:
        """Note a corrupt file (once), said in the log, counted against ``max_corrupt``.
        ``left_out``: its samples are left out of the run (a header that did not parse,
        counted 0; a shard an iterable pass skips), not replaced: until 2026-12-07 the
        log said "replacing" of those too. ``keys``: a tar shard's broken samples, only
        those replaced (:class:`BrokenSample`); each is noted once, in
        ``broken_samples``. ``whole``: the samples of a tar shard lost whole; ``cut``:
        those lost after the cut of one cut short."""
        tar = self._shard_counts is not None
        had = self.broken_samples.get(name, [])
        new = [k for k in dict.fromkeys(keys) if k not in had] if tar else []
        first = name not in self.corrupt_files
        if not first and not new and (not tar or whole <= self._whole.get(name, 0)):
            return
        if first:
            self.corrupt_files[name] = why
        if new:
            held = self.broken_samples.setdefault(name, [])
            for k in new:
                bisect.insort(held, k)
        if whole:
            self._whole[name] = max(whole, self._whole.get(name, 0))
        if cut:
            self._cut[name] = cut
        # (A worker's: said by its main process, the new samples' keys with it.)
        if not relay_news(self._token, (name, why, *new)) and first:
            some = bool(keys)
            done = f"{'leaving out' if left_out else 'replacing'} the{' broken' * some} samples"
            log.warning("headrace: %s of a corrupt file: %s", done, why)
        if tar:
            self._count_lost(name)
            return
        allowed = max(1, int(self.config.max_corrupt * len(self.files)))
        if len(self.corrupt_files) > allowed:
            listed = "; ".join(list(self.corrupt_files.values())[:5])
            more = len(self.corrupt_files) - 5
            # (A list of paths has no url: the message began with ": " until 2026-12-07.)
            where = self.files.url or f"a list of {len(self.files):,} paths"
            raise DataError(
                f"{where}: {len(self.corrupt_files)} of {len(self.files)} files are "
                f"corrupt, more than max_corrupt={self.config.max_corrupt:g} allows "
                f"({allowed}): {listed}" + (f"; and {more} more" if more > 0 else "")
            )

    def _count_lost(self, name: str) -> None:
        """Count tar shard ``name``'s lost samples against ``max_corrupt``: a tar dataset's
        share is of samples, broken samples over the shards' samples (a shard lost whole
        counts its samples). Until 2026-12-07 a shard of one broken sample counted as a
        corrupt file: a crawl's 1% of samples without a caption, or with a JPEG cut short,
        made nearly every shard count, and max_corrupt had to be near 1.0 (the guard off)."""
        counts = self._shard_counts
        assert counts is not None
        broken = len(self.broken_samples.get(name, ())) + self._cut.get(name, 0)
        lost = self._whole.get(name) or broken
        self._lost += lost - self._lost_by.get(name, 0)
        self._lost_by[name] = lost
        total = self._shard_total
        m = self.config.max_corrupt
        allowed = max(1, int(m * total))
        if self._lost <= allowed:
            return
        listed = []
        for shard in list(self.corrupt_files)[:5]:
            keys = self.broken_samples.get(shard, [])
            if shard in self._whole:
                listed.append(f"{self.corrupt_files[shard]} (all {self._whole[shard]} samples)")
                continue
            said = [f"sample{'s' * (len(keys) > 1)} {some_of([repr(k) for k in keys])}"] * bool(
                keys
            )
            if shard in self._cut:
                said.append(f"about {self._cut[shard]} after it is cut short")
            listed.append(f"{shard}: {' and '.join(said)}")
        more = len(self.corrupt_files) - 5
        first = next(iter(self.corrupt_files.values()))
        where = self.files.url or f"a list of {len(self.files):,} paths"
        raise DataError(
            f"{where}: {self._lost:,} of the {total:,} samples of {len(counts):,} tar shards "
            f"are broken, more than max_corrupt={m:g} allows ({allowed:,}): "
            + "; ".join(listed)
            + (f"; and {more} more shards" if more > 0 else "")
            + f" (the first: {first}); pass max_corrupt= the share of samples you accept "
            "(1.0: any), write the shards again without them, or leave a field some samples "
            "lack out of datasets="
        )

    # -- lifecycle -------------------------------------------------------------------
    def close(self) -> None:
        # The store first, so fetches stalled in a GET are cancelled rather than waited
        # out through their retries; then the window waits for its (now failing) fetches.
        self.files.close()
        self.window.close()
        if self._ranged is not None:
            self._ranged.close()
        if self._by_rows is not None:
            self._by_rows.close()
        self.decoder.close()
        self.files.close()

    def __getstate__(self) -> dict[str, Any]:
        # Worker copies own their store, window and decode pool: carry only what
        # re-opens them, and the listing, so a copy never lists again.
        # The NPY headers (TFRecord indexes) read by rows keeps travel too: without them a
        # copy read each file's header again before its rows (a GET more a file on
        # object storage; a GET a record for a TFRecord shard).
        f = self.files
        counts = self.plan.counts if self.counted else None
        heads: Held | dict[int, bytes] | None = None
        if isinstance(self._by_rows, (RangedNpy, RangedTfrecord)):
            heads = self._by_rows.held()
        # And the tar indexes: a copy walked each shard's headers again at its first read
        # by samples (on object storage a round trip a sample, in every worker).
        files, config, store_options = self._args
        at = f.url if f.remote else None
        if not isinstance(files, (str, os.PathLike)):
            if f.remote:
                # A list of object URLs: the copy opens the listing it is sent under their
                # root (where the parent's store was opened: its URL is percent-encoded
                # for file:// and http(s)://), as a prefix's copy does. Sent the list, each
                # copy named every URL again (decoded, split, sorted: 44 us a URL, 1M URLs
                # 44 s in each worker before its first read), and held it as a str a URL.
                files, at = f.url, opened_at(named_url(f.url))
            else:
                # A list of local paths is its listing's keys (sorted, as strings), which
                # a copy reads instead of listing: sent packed, not as a str a path again.
                files = f.keys
        if isinstance(config.labels, dict):
            # Not sent: "labels" carries what it resolved to, which a copy takes (ImageNet's
            # 1.28M file names with a class each: 55 MB pickled, 1.5 s, for every worker).
            config = dataclasses.replace(config, labels="folders", classes=None)
        return {
            "args": (files, config, store_options),
            "token": self._token,
            "listing": (f.keys, f.sizes, f.etags),
            "counts": counts,
            "heads": heads,
            "tar_indexes": None if self._indexes is None else self._indexes.held(),
            "listed_at": at,
            "labels": None if self.classes is None else (self.classes, self.file_labels),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        files, config, store_options = state["args"]
        carried = state.get("heads")
        listing, at = state["listing"], state.get("listed_at")
        tar = state.get("tar_indexes")
        self._token = state["token"]
        _BY_TOKEN.setdefault(self._token, self)  # (a copy in the process of the original)
        self._open(
            files,
            config,
            store_options,
            listing,
            state["counts"],
            carried,
            at,
            tar_held=tar,
            labels_held=state.get("labels"),
        )
