"""What a read's files decode to: each file decoded as its bytes arrive, on a pool of threads.

:class:`~headrace.formats.FileSource` decides which files a read needs and
keeps them coming through its :class:`FetchWindow`; this turns the bytes the
window holds into samples. It is apart from the source because it has its own
state and its own races: the decode threads (started on the first read that
needs them), the keys every file must share (the first file decoded, on any
thread, sets them), and the file whose bytes stay held for the next read.
Which file decodes first changes no batch: decodes are collected by file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._messages import byte_size
from headrace._warn import warn_user
from headrace.errors import ConfigError, DataError, FormatError, UnsupportedFormError
from headrace.formats import _npz as npz
from headrace.formats._file_config import FileSourceConfig
from headrace.formats._file_plan import FilePlan
from headrace.formats._file_samples import Sample, decode_file, pick_item, tag_count
from headrace.formats._file_window import FetchWindow
from headrace.formats._files import FileFormat
from headrace.formats._image_slots import ImageSlots, image_layout
from headrace.formats._npz import Inflated
from headrace.formats._sparse import MappedImage, SparseImage
from headrace.formats._tar import raise_broken
from headrace.formats._tar_ranges import TarImage, TarIndexes
from headrace.formats._tfrecord import Kinds, record_kinds, refuse_other_kinds
from headrace.io import usable_cpus
from headrace.io._daemon_pool import DaemonPool
from headrace.io._waits import wait_any, wait_done

__all__ = ["FileDecoder", "Into", "default_decode_threads"]

# A batch's image slots, and the slot of each file (the position of its first sample).
Into = tuple[ImageSlots, dict[int, int]]


def default_decode_threads() -> int:
    """Decode threads when none are asked for: the CPUs this process may use, at
    most 8. On 16 cores 8 threads decoded JPEGs 1.87x faster than 2, and 16 no
    faster than 8 (``benchmarks/decode_threads.py``); a 2-CPU machine keeps 2."""
    return min(8, usable_cpus())


@dataclass(eq=False, kw_only=True)
class FileDecoder:
    """Decode a source's files into samples, and pick samples out of them.

    ``name`` gives file ``f``'s name as errors say it (through the source: a
    closed source reopens its listing). ``counted``: each file's count is read or
    given (else ``samples_per_file`` is); ``rows``: samples are rows of a file's
    leading axis (else each file is one sample). ``threads``: decode threads (0:
    decode on the reading thread).
    """

    config: FileSourceConfig
    format: FileFormat
    plan: FilePlan
    window: FetchWindow
    name: Callable[[int], str]
    counted: bool
    rows: bool
    threads: int
    #: Tar shards' indexes, kept across reads (None: not tar).
    tar_indexes: TarIndexes | None = None
    #: File ``f``'s whole bytes, read apart from the window (see :meth:`_first_keys`).
    fetch: Callable[[int], Any] | None = None
    #: Refuse file ``f`` unless it is still the version listed (a local file's stat),
    #: before what the last read kept of it serves the next (see :meth:`fetch_and_decode`).
    recheck: Callable[[int], None] | None = None
    _pool: DaemonPool | None = field(default=None, init=False)
    _kept: int | None = field(default=None, init=False)
    # The kept file's deflated NPZ members read by rows, inflated (see Inflated).
    _inflated: tuple[int, Inflated] | None = field(default=None, init=False)
    # Under shuffle="samples" and map-style, every file's (see Inflated).
    _all_inflated: Inflated | None = field(default=None, init=False)
    # The keys of the first file decoded (name, keys): every file must hold the same.
    _keys: tuple[str, list[str]] | None = field(default=None, init=False)
    _keys_lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    # TFRecord/ArrayRecord: the record that fixes each feature's kind of list, and those.
    _kinds: tuple[str, Kinds] | None = field(default=None, init=False)
    # The kinds of the first file in listing order, which _first_keys decoded apart:
    # _first_kinds's too (each fetched it whole, so a process fetched that file twice).
    _first_read: tuple[int, Kinds] | None = field(default=None, init=False)

    @property
    def keys(self) -> list[str] | None:
        """The keys every file holds, once one is decoded (``None`` before)."""
        return None if self._keys is None else self._keys[1]

    def decode(
        self,
        f: int,
        data: Any,
        into: Into | None = None,
        rows: NDArray[np.int64] | None = None,
        inflated: Inflated | None = None,
    ) -> Sample:
        """File ``f``'s arrays (``into``: the batch's image slots; ``rows``: the samples
        to decode, all where ``None``; ``inflated``: its NPZ members kept inflated)."""
        try:
            sample = self._decoded(f, data, into, rows, inflated)
        except DataError as exc:  # a count refused: check() tells a setting from damage
            tag_count(exc, self.name(f), self._count_says())
            raise
        keys = sorted(sample)
        with self._keys_lock:  # decode threads: only one may be the first
            if self._keys is None:
                self._keys = self._first_keys(f, keys)
            first = self._keys
        if keys != first[1]:
            # Caught here, not where a batch is stacked: there it named no file, and a
            # batch of this file alone went through with other keys than the rest.
            raise FormatError(
                f"{self.name(f)}: holds {keys}, but {first[0]} holds {first[1]}; every "
                "file of a dataset must hold the same keys"
            )
        if self.config.decode and self.format.name in ("tfrecord", "array_record"):
            record = int(rows[0]) if rows is not None and len(rows) else 0
            with self._keys_lock:
                if self._kinds is None:
                    self._kinds = self._first_kinds(f, sample, record)
            refuse_other_kinds(sample, name=self.name(f), record=record, fixed=self._kinds)
        return sample

    def _first_kinds(self, f: int, sample: Sample, record: int) -> tuple[str, Kinds]:
        """The record that fixes each feature's kind of list (``int64_list``, ``float_list``,
        ``bytes_list``) in a TFRecord or ArrayRecord dataset, named, and those kinds: record
        0 of the first file in listing order that holds records and decodes, in every
        process alike (a host whose share held only a shard of bytes labels trained on
        them, unrefused); file ``f``'s read (``sample``, its first record ``record``)
        where it is that record, or where files cannot be fetched apart."""
        fetch = self.fetch
        for g in range(self.plan.num_files):
            if fetch is None or self.plan.count(g) == 0:
                continue
            if g == f and record == 0:
                break
            read = self._first_read
            if read is not None and read[0] == g:
                return f"{self.name(g)}: record 0", read[1]
            try:
                first = self._decoded(g, fetch(g), rows=np.zeros(1, np.int64))
            except DataError:
                continue  # damaged (or another form): it says so where it is read
            return f"{self.name(g)}: record 0", record_kinds(first)
        return f"{self.name(f)}: record {record}", record_kinds(sample)

    def _first_keys(self, f: int, keys: list[str]) -> tuple[str, list[str]]:
        """The file whose keys every file must hold, and its keys: the first file decoded
        (``f``, holding ``keys``); under ``on_corrupt="replace"``, where files may hold
        other keys (NPZ members, tar fields or TFRecord features without ``datasets=``),
        the first file in listing order that decodes, whichever a process decodes first.
        The first decoded judged the rest: a worker whose first read was the one NPZ of
        an extra member replaced the samples of every other file."""
        c = self.config
        if (
            c.on_corrupt == "raise"
            or c.datasets is not None
            or self.fetch is None
            or self.format.name not in ("npz", "tar", "tfrecord", "array_record")
        ):
            return self.name(f), keys
        for g in range(self.plan.num_files):
            if g == f:
                break
            if self.plan.count(g) == 0:
                continue
            try:
                sample = self._decoded(g, self.fetch(g))
                if self.format.name in ("tfrecord", "array_record"):
                    self._first_read = (g, record_kinds(sample))
                return self.name(g), sorted(sample)
            except UnsupportedFormError:
                raise  # not corrupt (see _checked)
            except DataError:
                continue  # corrupt itself: the next one says
        return self.name(f), keys

    def _decoded(
        self,
        f: int,
        data: Any,
        into: Into | None = None,
        rows: NDArray[np.int64] | None = None,
        inflated: Inflated | None = None,
    ) -> Sample:
        """File ``f``'s arrays, as :meth:`decode` gives them, before its keys are checked."""
        c = self.config
        name = self.name(f)
        out = None
        if into is not None:
            mode, turn = c.image_mode, c.exif_transpose
            layout = image_layout(
                data, fmt=self.format.name, mode=mode, exif_transpose=turn, name=name
            )
            out = into[0].slot(into[1][f], layout)
        if isinstance(data, SparseImage) and rows is not None:
            data.want(rows)  # fetched for other samples (kept from the last read, say)
        index = None
        if self.tar_indexes is not None and not isinstance(data, TarImage):
            index = self.tar_indexes.of(f, data, name)
        sample = decode_file(
            self.format,
            data,
            name=name,
            decode=c.decode,
            datasets=c.datasets,
            image_mode=c.image_mode,
            exif_transpose=c.exif_transpose,
            out=out,
            rows=rows,
            count=None if rows is None else (self.plan.count(f), self._count_says()),
            tar_index=index,
            verify=c.verify,
            inflated=inflated,
            broken=self._broken,
        )
        if isinstance(data, MappedImage):
            # Copies, not views of the map (a batch must not hold a file's pages), of
            # the version listed (rewritten in place during the copy: refused).
            mapped = data.buffer
            sample = {
                k: v.copy() if np.may_share_memory(v, mapped) else v for k, v in sample.items()
            }
            data.check()
        if isinstance(data, SparseImage):  # it grew: the chunks above, or h5py's own reads
            self.window.recount(f)
        if "index" in sample:  # not corrupt (never replaced): to be left out
            raise ConfigError(
                f"{name}: holds an array named 'index', which would hide the batch's "
                "'index' (each sample's number in dataset order); leave it out with "
                "datasets=(...)"
            )
        return sample

    def _count_says(self) -> str:
        """What gives each file's count, as errors about it say."""
        spf = self.config.samples_per_file  # (a tar shard is counted, but N can be given)
        return f"samples_per_file={spf}" if isinstance(spf, int) else "its count"

    def decode_one(self, f: int, data: Any, item: int) -> Sample | DataError:
        """Item ``item`` of file ``f`` decoded whole, copied out of it (map-style and
        replacements read a file per sample), or its error (as :meth:`pick_checked`).
        An NPZ of several samples is read by that row, its deflated members kept
        inflated for the file's other samples (each sample inflated them whole: a
        file of 16 samples, 16 times an epoch)."""
        if self.rows and self.config.decode and self.format.name == "npz":
            rows = np.array([item], np.int64)
            inflated = self.inflated()
            decoded = self._checked(lambda: self.decode(f, data, rows=rows, inflated=inflated))
            return self.pick_checked(decoded, f, item, own=True, rows=rows)
        return self.pick_checked(self._checked(lambda: self.decode(f, data)), f, item, own=True)

    def inflated(self) -> Inflated:
        """The deflated NPZ members kept inflated for every file (shuffle="samples",
        map-style): one :class:`Inflated` a source, in each process."""
        kept = self._all_inflated
        if kept is None:
            map_style = self.config.mode == "map-style"
            kept = self._all_inflated = Inflated(
                _inflated_again_per_sample if map_style else _inflated_again
            )
        return kept

    def kept_members(self, f: int) -> npz.KeptMembers | None:
        """File ``f``'s NPZ members read, where all are kept inflated (:class:`Inflated`):
        a read of their rows needs none of its bytes, which need not be fetched."""
        kept = self._all_inflated
        if kept is None or self.format.name != "npz":
            return None
        return kept.members(self.name(f), self.config.datasets)

    @property
    def _broken(self) -> bool:
        """Whether a tar sample that does not read is replaced alone (``on_corrupt=
        "replace"``): its shard decodes, the sample's error in its place (see
        :func:`~headrace.formats._tar.decode_tar`), raised when it is picked."""
        return self.format.name == "tar" and self.config.on_corrupt == "replace"

    def pick(self, arrays: Sample, f: int, item: int) -> Sample:
        """Item ``item`` of file ``f``'s decoded arrays (a :class:`DataError` naming the
        file where its leading axis is not its count; a tar sample's that does not read)."""
        got = pick_item(arrays, item, self.plan.count(f), self.name(f), counted=self.counted)
        if self._broken:
            raise_broken(got)
        return got

    def pick_checked(
        self,
        arrays: Sample | DataError,
        f: int,
        item: int,
        *,
        own: bool = False,
        rows: NDArray[np.int64] | None = None,
    ) -> Sample | DataError:
        """Item ``item`` of file ``f``'s arrays; with ``on_corrupt="replace"``, the error
        of its decode or pick is returned. ``own``: copied out of the decoded file, so the file
        can be freed (map-style decodes a whole file per sample: as views, a batch of
        400 samples of 143 MB files held 57 GB until it was stacked). ``rows``: the
        file's samples decoded (all where ``None``)."""
        if isinstance(arrays, DataError):
            return arrays

        def pick() -> Sample:
            if rows is not None:
                at = int(np.searchsorted(rows, item))
                got = pick_item(arrays, at, len(rows), self.name(f), counted=True)
                if self._broken:
                    raise_broken(got)
            else:
                got = self.pick(arrays, f, item)
            return {k: v.copy() for k, v in got.items()} if own and self.rows else got

        return self._checked(pick)

    def gather(
        self,
        decoded: dict[int, Sample | DataError],
        files: NDArray[np.int64],
        items: NDArray[np.int64],
        rows: dict[int, NDArray[np.int64]] | None,
    ) -> dict[str, NDArray[Any]] | None:
        """The batch's arrays for samples ``(files, items)``, each key's gathered from
        the files' decoded arrays by one indexed copy a file, as :meth:`pick_checked`
        then :func:`stack_samples` would make them; ``None`` where those must (a file
        whose decode failed, an array of another leading length, shape or dtype than
        the first file's: their errors, or a ragged batch; object arrays, whose items
        may be arrays), and for files of one sample each (the file is the sample).
        Picking a sample at a time cost ~8 us of Python a sample (a file name, a
        search, a dict), 50% of the Python of a read of 4 KB NPY rows."""
        first = decoded[int(files[0])]
        if isinstance(first, DataError):
            return None
        out: dict[str, NDArray[Any]] = {}
        parts: dict[str, list[tuple[NDArray[np.intp], NDArray[Any]]]] = {k: [] for k in first}
        # Each file's samples' places in the batch, by one sort (a comparison of every
        # sample with each file was quadratic in a read of many files).
        order = np.argsort(files, kind="stable")
        cuts = np.flatnonzero(np.diff(files[order])) + 1
        places = {int(files[g[0]]): g for g in np.split(order, cuts)}
        for f, arrays in decoded.items():
            if isinstance(arrays, DataError):
                return None
            n = len(rows[f]) if rows is not None else self.plan.count(f)
            if n == 1 and rows is None and not self.counted:
                return None  # the file is the sample: no leading axis to pick from
            at = places[f]  # (decoded: this read's files only)
            if rows is not None and len(at) == n:
                # Each row decoded once, for one place (rows are the file's samples
                # asked, without repeats): scattered there, one copy, not two.
                at = at[np.argsort(np.searchsorted(rows[f], items[at]))]
                picks = None
            else:
                picks = items[at] if rows is None else np.searchsorted(rows[f], items[at])
            for k, a in arrays.items():
                if not isinstance(a, np.ndarray) or a.ndim == 0 or a.shape[0] != n:
                    return None
                if a.dtype.hasobject:  # (an item may be an array of its own, or ragged)
                    return None
                parts[k].append((at, a if picks is None else a[picks]))
        for k, got in parts.items():
            like = got[0][1]
            if any(g.shape[1:] != like.shape[1:] or g.dtype != like.dtype for _, g in got):
                return None
            if not like.dtype.isnative:  # (np.stack makes it native; decoders already do)
                return None
            batch = np.empty((len(files), *like.shape[1:]), like.dtype)
            for at, g in got:
                batch[at] = g
            out[k] = batch
        return out

    def _checked(self, fn: Callable[[], Sample]) -> Sample | DataError:
        """``fn()``; with ``on_corrupt="replace"``, a data error it raises is returned, but
        an :class:`UnsupportedFormError` (a form headrace does not read: an HDF5 external
        link, a bzip2 NPZ member; a filter plugin this process has not loaded): the file is
        sound, and replacing it trained on the other files alone, silently."""
        try:
            return fn()
        except DataError as exc:
            if self.config.on_corrupt == "raise" or isinstance(exc, UnsupportedFormError):
                raise
            return exc

    def fetch_and_decode(
        self,
        order: list[int],
        into: Into | None = None,
        rows: dict[int, NDArray[np.int64]] | None = None,
    ) -> dict[int, Sample | DataError]:
        """Decode each file of ``order`` as the window gives its bytes, releasing its
        slot when done (``into``: the batch's image slots, and each file's slot;
        ``rows``: the samples to decode of each file, all where ``None``)."""
        threads = self.threads
        last = order[-1] if order else None
        if self._kept is not None and self._kept not in order:
            self.window.release(self._kept)
        elif self._kept is not None and self.recheck is not None:
            # What the last read kept of it (its bytes, its map, its members inflated) was
            # the version listed then: a file replaced, rewritten, cut short or deleted
            # since served this read from them unchecked, where a fetch refuses it.
            self.recheck(self._kept)
        # Files held already (kept from the last read, fetched ahead) are taken first:
        # taking a file not started while they wait their turn held more files than
        # in_flight (2 with in_flight=1, where a chunk ends an epoch on a file the next
        # epoch visits again, or speculation fetched a file of the next chunk but one).
        # The order of decodes changes no batch.
        held = self.window.held()
        order = [f for f in order if f in held] + [f for f in order if f not in held]
        # With several samples per file, the chunk's last file usually goes on into the
        # next chunk: keep its bytes until the next read says otherwise; only if it is
        # taken last (kept while others are taken, it would be one file too many).
        keep = last if order and last == order[-1] and self.plan.count(last) > 1 else None
        self._kept = keep
        # Its deflated NPZ members inflated too (each read of its rows inflated them again):
        # the last read's kept file's, for this read's rows of it; let go once it is decoded
        # and not kept (at most one file's between reads).
        inflated = dict([self._inflated]) if self._inflated is not None else {}
        self._inflated = None
        if rows is not None and self.format.name == "npz" and self.config.shuffle == "samples":
            # A few rows of most files a read, all epoch long: every file's kept (bounded).
            inflated = dict.fromkeys(order, self.inflated())
        elif keep is not None and rows is not None and self.format.name == "npz":
            self._inflated = (keep, inflated.setdefault(keep, Inflated()))

        def done(f: int, data: Any = None) -> None:
            # A cache entry's map is not kept for the next read as it is: the rows that
            # read asks may lie in blocks not checked yet, which its own fetch checks.
            if f != keep or (isinstance(data, MappedImage) and data.checked_a_visit):
                self.window.release(f)
            if f != keep:
                inflated.pop(f, None)  # its last read: its members let go now

        def decode(f: int, data: Any) -> Sample | DataError:
            want = None if rows is None else rows[f]
            kept = inflated.get(f)
            return self._checked(lambda: self.decode(f, data, into, want, kept))

        if threads == 0 or len(order) == 1:
            out = {}
            for f in order:
                data = None
                try:
                    data = self.window.take(f)
                    out[f] = decode(f, data)
                finally:
                    done(f, data)
            return out

        def job(f: int, data: Any) -> Sample | DataError:
            try:
                return decode(f, data)
            finally:
                done(f, data)

        if self._pool is None:
            # Daemon threads: a decode reads a mapped file's pages, and one stuck in a
            # stalled mount must not hold the exit.
            self._pool = DaemonPool(threads, thread_name_prefix="headrace-decode")
        pending: dict[int, Future[Sample | DataError]] = {}
        # The decodes not seen done yet: a few more than the threads, so that each file
        # costs O(threads) looks, not one at every decode of the read (a read of 512
        # files looked 131,000 times).
        running: list[Future[Sample | DataError]] = []
        inline: dict[int, Sample | DataError] = {}  # decoded on this thread
        try:
            for f in order:
                # Taking a file the window has not started would fetch past its
                # bound while decodes still hold every slot: wait for one to free.
                while self.window.full_without(f) and _wait_for_one(running):
                    pass
                data = self.window.take(f)
                if rows is not None and isinstance(data, MappedImage):
                    # Rows copied from pages in memory: handing the copy to a thread
                    # cost more than it (an epoch of 16 files' 4 KB rows 0.19 -> 0.14 s).
                    inline[f] = job(f, data)
                    continue
                pending[f] = self._pool.submit(job, f, data)
                running.append(pending[f])
                # Bound the bytes parked in the decode queue: a slot is only freed
                # once its file is decoded, so the window bound holds anyway; this
                # keeps one slow decode from idling the fetches behind it.
                if len(running) > 2 * threads:
                    _prune(running)
                    while len(running) > 2 * threads:
                        _wait_for_one(running)
            wait_done(pending.values())
            return {f: inline[f] if f in inline else pending[f].result() for f in order}
        except BaseException:
            for p in pending.values():
                p.cancel()
            # (A file decoded on this thread was released by its job: again, a no-op.)
            for f in order:
                if f not in pending or pending[f].cancelled():
                    done(f)
            raise

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._kept = None
        self._inflated = None
        self._all_inflated = None


def _inflated_again(name: str) -> None:
    """Said once a source, when deflated NPZ members read under ``shuffle="samples"``
    outgrow what is kept inflated (:class:`Inflated`)."""
    warn_user(
        f"{name}: the deflated NPZ members (np.savez_compressed) read under "
        f'shuffle="samples" inflate to more than the {byte_size(npz.KEPT_INFLATED)} kept '
        "inflated (a source, in each process): members let go are inflated whole again by "
        "later reads of their rows (up to once a read: an epoch of a file of N samples "
        "inflates its members up to N times). Write the files with np.savez (stored: "
        'rows read without inflating), or read them with shuffle="files" (a file\'s rows '
        "in runs: inflated about once an epoch)"
    )


def _inflated_again_per_sample(name: str) -> None:
    """Said once a source, when deflated NPZ members read by ``mode="map-style"`` outgrow
    what is kept inflated (:class:`Inflated`)."""
    warn_user(
        f'{name}: the deflated NPZ members (np.savez_compressed) read by mode="map-style" '
        f"inflate to more than the {byte_size(npz.KEPT_INFLATED)} kept inflated (a source, "
        "in each process): members let go are inflated whole again (and fetched again) "
        "for each later sample of their file. Write the files with np.savez (stored: rows "
        'read without inflating), or read them with mode="headrace" and shuffle="files" '
        "(a file's rows in runs: inflated about once an epoch)"
    )


def _prune(running: list[Future[Any]]) -> None:
    """Drop the decodes that have ended from ``running`` (in place)."""
    running[:] = [p for p in running if not p.done()]


def _wait_for_one(running: list[Future[Any]]) -> bool:
    """Wait until one of the decodes in ``running`` ends (raising its error), and drop
    the ended ones from it; ``False`` if none was running.

    The running ones are listed once and waited on together: a decode may end between
    a look at ``done()`` and the next (on the pool's thread), and picking "the first
    one not done" after counting them raised ``StopIteration`` when none was left,
    which the loader's generator turned into a ``RuntimeError`` mid-epoch.
    """
    _prune(running)
    if not running:
        return False
    wait_any(running)
    for p in running:
        if p.done():
            p.result()
    _prune(running)
    return True
