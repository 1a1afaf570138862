"""NPY files of many samples read by rows: the header and the rows a read asks, not the file.

An NPY file's rows lie one after another after its header: row ``i`` of a
C-order array is the ``row_bytes`` at ``header + i * row_bytes``. Under
``shuffle="samples"`` a file of 1,000 samples is visited by about one sample a
read, and fetching it whole for each read read 1,000 times the bytes used (on
object storage, one whole-object GET per sample). Here a file is held as a
:class:`~headrace.formats._sparse.SparseImage` of its size into which only its
header and the rows asked are read: neighbours within 64 KiB joined (the I/O
engine's gap), locally a ``pread`` each on the window's thread (``in_flight``
files at once; O_DIRECT through :class:`~headrace.io.RangeReader`), each read
checked against the file's listed size and version; on object storage by ranged
GETs all in flight at once (each checked against the listed size and ETag). A
local file whose header and rows asked are all in memory is read through a map of
it instead (:meth:`RangedNpy._mapped`): the decode copies the rows from the page cache;
so is an object's whole entry in ``cache_dir`` (its blocks joined).
The bytes of a row are the file's, so batches are those of whole files. Files
under ``above`` bytes (``npy_ranges_above``: 3.5 MiB on a local disk, 2 MiB on a
network or FUSE mount, 8 MiB on object storage) are read whole: there a read by rows
cost more than the bytes it saved.

A file's header is learned at its first read and kept (a few hundred bytes a
file, ``HEAD_BYTES`` in all): later reads of it fetch only rows. With
``samples_per_file="header"`` the count read every header already, and hands them
over (:meth:`RangedNpy.seed`): a first read then fetches rows only. A file not seen
yet is read with the layout of the last file of its size as a guess, header and
rows in one batch of reads; of a size not seen yet, with the rows its count
(``samples_per_file=N``, or a list of counts) places after the last header
length seen (128 bytes before any: NumPy's for most arrays). A header that says
otherwise costs a second batch, never other bytes. Fortran-order arrays (rows
are not runs of bytes) and headers that do not parse are read whole: decoding
then says what is wrong, as before.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from headrace.errors import FormatError
from headrace.formats._hdf5_ranges import FileLayout, contiguous_rows
from headrace.formats._kept_maps import KEPT, WHOLE_RESIDENT, KeptMap
from headrace.formats._lazy_queue import LazyQueue, LazyReader
from headrace.formats._npy import NPY_HEAD, npy_header
from headrace.formats._sparse import MAX_GAP, MappedImage, SparseImage

if TYPE_CHECKING:
    from headrace.formats._file_list import FileList, LocalRead

__all__ = ["CACHE_BLOCK", "HEAD_BYTES", "RangedNpy", "Held", "npy_layout"]

#: The header bytes a source keeps, of the files read last (about 128 bytes a file).
HEAD_BYTES = 16 << 20
#: The file sizes whose last layout a source keeps as a guess (about 200 bytes each).
GUESSES = 1 << 16
#: The least a ``pread`` of a local file's rows (joined within ``MAX_GAP``) would read
#: for the file to be read through a map instead: below it, a map's cost was more than
#: the buffer's (64 KiB files by rows, page cache: 2.7 s mapped against 1.3 by pread).
MAP_FROM = 1 << 20
#: With ``cache_dir``, an object's rows are kept as the 64 KiB blocks they touch (the
#: I/O engine's gap: the bytes a joined GET may hold between two rows anyway), so a
#: row is found again whatever rows share its read (see ``FileList.fetch_ranges``).
CACHE_BLOCK = 64 << 10

# (payload offset, bytes per row, rows): where a file's rows lie.
Rows = tuple[int, int, int]
#: Headers a source keeps, for a copy of it: (header bytes, layout) -> the files that have it.
Held = dict[tuple[bytes, Rows], NDArray[np.int64]]


def npy_layout(
    dtype: np.dtype[np.generic], shape: tuple[int, ...], fortran: bool, offset: int
) -> Rows | None:
    """Where the rows of an NPY array lie, ``None`` where they are not runs of bytes
    (Fortran order of 2 or more axes, a 0-d array, items of no bytes)."""
    if not shape or dtype.itemsize == 0 or (fortran and len(shape) > 1):
        return None
    row = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
    return (offset, row, shape[0]) if row else None


def _rows_of(at: Callable[[int, int], memoryview], name: str, size: int) -> Rows | None:
    """Where the rows of the NPY file of ``size`` bytes whose header ``at`` reads lie;
    ``None`` where they are not runs of bytes or the header does not parse (decoding
    the whole file then says what is wrong, naming it)."""
    try:
        dtype, shape, fortran, offset = npy_header(at, name)
    except FormatError:
        return None
    layout = npy_layout(dtype, shape, fortran, offset)
    if layout is not None and layout[0] + layout[1] * layout[2] != size:
        return None  # truncated or padded: decoding refuses it by name
    return layout


def _bytes_at(data: bytes) -> Callable[[int, int], memoryview]:
    """An ``at(offset, length)`` over ``data`` (a header read before)."""
    view = memoryview(data)
    return lambda a, n: view[a : a + n]


def _layout(rows: Rows) -> FileLayout:
    offset, row, n = rows
    return FileLayout(metadata=[(0, offset)], data={"data": contiguous_rows(offset, row, n)})


class RangedNpy:
    """Sparse images of one source's NPY files, read by rows (local or remote).

    ``files()``: the source's current listing (a reopened source has a new store).
    """

    def __init__(
        self,
        files: Callable[[], FileList],
        in_flight: int,
        local_read: LocalRead,
        above: int,
        count: Callable[[int], int] | None = None,
    ) -> None:
        self._files = files
        # A file's samples where a source gives them (samples_per_file=N): a file of a
        # size not seen yet is read with the rows they place as a guess.
        self._count = count
        self._offset = NPY_HEAD  # the last header length seen
        self.above = above
        self._local_read = local_read
        self._lock = threading.Lock()
        # Header bytes and row layout by file, least recently used first (HEAD_BYTES).
        self._heads: OrderedDict[int, tuple[bytes, Rows | None]] = OrderedDict()
        self._head_bytes = 0
        self._by_size: dict[int, Rows] = {}  # the last layout seen for a file size
        self._queue = LazyQueue(in_flight, "headrace-npy-rows")
        self._reader = LazyReader(local_read)
        #: Images of local files read through a map (the others: by ``pread``).
        self.mapped = 0
        self._owner = KEPT.owner()  # of the files' maps kept (_kept_maps)
        # A source dropped without close() keeps no map (nor its two descriptors).
        weakref.finalize(self, KEPT.drop, self._owner)

    def applies(self, f: int) -> bool:
        """Whether file ``f`` is read by rows: at least ``above`` bytes."""
        return self._files().sizes[f] >= self.above

    def image(self, f: int, rows: NDArray[np.int64] | None) -> SparseImage:
        """File ``f``'s header and rows ``rows`` (``None``: the header only; the
        decode's :meth:`SparseImage.want` fetches the rows it then asks)."""
        files = self._files()
        size, name = files.sizes[f], files.name(f)
        # Mapped: a local file (not read by O_DIRECT), an object's whole cache entry.
        if files.cache is not None if files.remote else self._local_read != "odirect":
            mapped = self._mapped(f, rows)
            if mapped is not None:
                return mapped
        if files.remote:
            fetch = files.fetch_ranges(f, self._queue.get(), cache_block=CACHE_BLOCK)
        else:
            reader = self._reader.get() if self._local_read == "odirect" else None
            fetch = files.local_ranges(f, reader)
        image = SparseImage(size, fetch, name)
        want = np.empty(0, np.int64) if rows is None else rows
        with self._lock:
            kept = self._heads.get(f)
            if kept is not None:
                self._heads.move_to_end(f)
            guess = self._by_size.get(size)
            offset = self._offset
        if guess is None and self._count is not None:
            # 1,000 sizes among 10,000 files cost a header read before the rows, in
            # series, for each file of a size not seen yet (868 of 1,985 files read).
            n = self._count(f)
            if n > 0 and size > offset and (size - offset) % n == 0:
                guess = (offset, (size - offset) // n, n)
        if kept is not None:
            head, layout = kept
            image.put([(0, head)])
            if layout is None:  # not rows of bytes (or a header that does not parse)
                image.fill([(0, size)])
            else:
                image.layout = _layout(layout)
                image.want(want)
            return image
        if guess is not None:  # the header and the rows it would place, in one batch
            image.layout = _layout(guess)
            image.want(want)
        else:
            image.fill([(0, min(NPY_HEAD, size))], gap=0)
        layout = _rows_of(image.at, name, size)
        if layout is None:
            image.layout = None
            image.fill([(0, size)])
        elif layout != guess:
            image.layout = _layout(layout)
            image.want(want)
        self._keep(f, image.take([(0, layout[0] if layout else min(NPY_HEAD, size))]), layout, size)
        return image

    def _mapped(self, f: int, rows: NDArray[np.int64] | None) -> MappedImage | None:
        """Local file ``f`` (on object storage: its whole entry in the cache, once its
        blocks are joined: :meth:`ObjectCache.blocks_read`) through a map of it, where
        the pages of its header and of rows ``rows`` (``None``: not known yet; then
        the whole file, if at most
        ``WHOLE_RESIDENT`` bytes) are all in memory now (``mincore``; a local file's map
        is kept between visits, and one found all in memory is not asked again for a
        while: :mod:`~headrace.formats._kept_maps`): the decode
        copies the rows from the page cache, with no ``pread`` into a buffer of the
        file's size whose pages fault in first, and one copy fewer. ``None``
        otherwise, where rows are read by ``pread``: a file not in memory (pages a
        map faults in are read one at a time, and by the decode's threads, not the
        window's), on a network or FUSE mount, whose header is not rows of bytes or
        not read yet (its first read, by ``pread``, keeps it), or where the ``pread``
        would read less than ``MAP_FROM`` (its rows joined as it joins them): there
        the map's own cost (~200 us: open, map, ``mincore``, checks) is more than the
        buffer's.
        An epoch of 16,000 rows of 4 KB from 16 files in the page cache, against the
        tree before this and the gather by file (FileDecoder.gather): 0.352 -> 0.204 s
        (0.278 with the gather alone); with the pages dropped first, 0.474 -> 0.457 s.
        From a warm cache (4 objects of 16 MB, ``benchmarks/cache_blocks_ab.py``):
        0.254 -> 0.135 s, where a local file's epoch takes 0.11-0.17."""
        files = self._files()
        size = files.sizes[f]
        with self._lock:
            kept = self._heads.get(f)
            if kept is not None:
                self._heads.move_to_end(f)
        if kept is None or kept[1] is None or size < MAP_FROM:
            return None  # (a file's first read, by pread, keeps its header)
        layout = _layout(kept[1])
        if rows is not None:
            starts, ends = layout.span_arrays(rows)
        elif size <= WHOLE_RESIDENT:
            starts, ends = np.zeros(1, np.int64), np.full(1, size, np.int64)
        else:
            return None
        if _joined(starts, ends) < MAP_FROM:
            return None
        if files.remote:  # its whole entry in the cache, if any (the bytes read checked)
            local = self._cached_map(f, kept[1][0], starts, ends)
            check = files.check_entry
        else:
            local = self._local_map(f)
            check = files.check_listed
        if local is None or not local.in_memory(starts, ends):
            return None
        # An object's entry: the bytes each read copies from it are the cache's hits,
        # and each read visits it (the blocks it reads checked).
        hit = files.cache.hit if files.cache is not None and files.remote else None
        image = MappedImage(
            local.file, files.name(f), lambda fd: check(f, fd), size, hit, files.remote
        )
        image.layout = layout
        with self._lock:
            self.mapped += 1
        return image  # (the decode's want checks the file, then counts the rows)

    def _cached_map(
        self, f: int, head: int, starts: NDArray[np.int64], ends: NDArray[np.int64]
    ) -> KeptMap | None:
        """Object ``f``'s whole entry in the cache mapped (:meth:`FileList.cached_map`),
        kept for its next visits, the blocks each visit reads (its header's ``head``
        bytes and ``[starts, ends)``) checked, once a process."""
        files = self._files()
        entry = files.cached_entry(f)
        if entry is None:
            return None

        def spans() -> list[tuple[int, int]]:
            return [(0, head), *zip(starts.tolist(), ends.tolist(), strict=True)]

        return KEPT.get(
            self._owner,
            f,
            entry,
            lambda: files.cached_map(f, spans),
            lambda file: files.cached_checked(f, file, spans),
        )

    def _local_map(self, f: int) -> KeptMap | None:
        """Local file ``f`` mapped (:meth:`FileList.local_map`), kept for its next visits
        (:data:`~headrace.formats._kept_maps.KEPT`); one changed in place is refused by
        the image's checks (``check_listed``) at every read."""
        files = self._files()
        return KEPT.get(self._owner, f, files.name(f), lambda: files.local_map(f))

    def seed(self, heads: Mapping[int, bytes]) -> None:
        """Keep headers read before (by ``samples_per_file="header"``'s count: file ->
        its bytes up to the payload), so that a file's first read fetches only rows,
        not its header a second time (a serial round trip before the rows where no
        file of its size was read yet). Files read whole (under ``above``) are skipped."""
        files = self._files()
        parsed: dict[tuple[bytes, int], Rows | None] = {}  # files of one shape: one parse
        for f, head in heads.items():
            size = files.sizes[f]
            if size < self.above:
                continue
            if (head, size) not in parsed:
                parsed[head, size] = _rows_of(_bytes_at(head), files.name(f), size)
            layout = parsed[head, size]
            if layout is not None and layout[0] == len(head):
                self._keep(f, [(0, head)], layout, size)

    def held(self) -> Held:
        """The headers kept with their layouts (those that parsed), for a copy of the
        source to take (:meth:`take_held`): each distinct one with the files that have it.
        Files of one dtype and shape share one, so a copy carries 8 bytes a file, not
        ~128; and the layouts, so it parses none (~50 us a header)."""
        with self._lock:
            kept = [(f, data, rows) for f, (data, rows) in self._heads.items() if rows]
        by: dict[tuple[bytes, Rows], list[int]] = {}
        for f, data, rows in kept:
            by.setdefault((data, rows), []).append(f)
        return {key: np.array(fs, dtype=np.int64) for key, fs in by.items()}

    def take_held(self, held: Held) -> None:
        """Keep the headers and layouts another copy :meth:`held`."""
        sizes = self._files().sizes
        for (data, rows), fs in held.items():
            for f in fs.tolist():
                self._keep(f, [(0, data)], rows, sizes[f])

    def _keep(self, f: int, head: list[tuple[int, bytes]], layout: Rows | None, size: int) -> None:
        if not head:
            return
        data = head[0][1]
        with self._lock:
            if layout is not None:
                self._by_size.pop(size, None)  # the latest last: the oldest goes first
                self._by_size[size] = layout
                if len(self._by_size) > GUESSES:
                    del self._by_size[next(iter(self._by_size))]
                self._offset = layout[0]
            if f in self._heads:
                return
            self._heads[f] = (data, layout)
            self._head_bytes += len(data)
            while self._head_bytes > HEAD_BYTES and len(self._heads) > 1:
                _, (old, _) = self._heads.popitem(last=False)
                self._head_bytes -= len(old)

    def close(self) -> None:
        """Close the request queue and the local reader, and drop the maps kept (the
        headers are kept)."""
        self._queue.close()
        self._reader.close()
        KEPT.drop(self._owner)


def _joined(starts: NDArray[np.int64], ends: NDArray[np.int64]) -> int:
    """The bytes read for spans ``[starts, ends)`` (sorted, disjoint) joined within
    ``MAX_GAP``, as a :class:`SparseImage` joins them for a ``pread``."""
    gaps = starts[1:] - ends[:-1]
    return int((ends - starts).sum() + gaps[gaps <= MAX_GAP].sum())
