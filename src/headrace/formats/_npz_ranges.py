"""NPZ files of many samples read by rows: the zip's directory, the members' headers and
the rows a read asks, not the file (``npz_ranges_above``).

``np.savez`` stores its members uncompressed: each is an NPY file inside the zip, its
rows one after another after its header. Under ``shuffle="samples"`` a file of 1,000
samples is visited by about one sample a read, and fetching it whole read 1,000 times
the bytes used. Here a file is held as a :class:`~headrace.formats._sparse.SparseImage`
into which only its metadata (the directory at the end, each member's local header
and NPY header, learned at the file's first read and kept) and the rows asked of
each member read are fetched (locally a ``pread`` a span; on object storage ranged
GETs, all in flight at once; neighbours within 64 KiB joined). A deflated member,
or a Fortran-order one, is fetched whole (its rows are not runs of the file's bytes).

The price: a stored member's CRC-32 covers the whole member, so it is not checked
(a changed byte in a row is read as a value, as in an NPY file). The directory, the
local headers, the NPY headers and each member's size still are; a deflated member
is still inflated and checked whole.
"""

from __future__ import annotations

import struct
import threading
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import FormatError
from headrace.formats._hdf5_ranges import FileLayout, contiguous_rows
from headrace.formats._lazy_queue import LazyQueue
from headrace.formats._npy import npy_header
from headrace.formats._npy_ranges import CACHE_BLOCK, npy_layout
from headrace.formats._npz import npz_members
from headrace.formats._sparse import BLOCK, Span, SparseImage
from headrace.io._ranges import merge_ranges

if TYPE_CHECKING:
    from headrace.formats._file_list import FileList

__all__ = ["RangedNpz", "learn_npz"]

#: The metadata bytes a source keeps, of the files read last (a few KiB a file).
META_BYTES = 16 << 20


def learn_npz(image: SparseImage, keys: Sequence[str] | None) -> FileLayout | None:
    """Where the rows of each member in ``keys`` (all where ``None``) lie in the NPZ in
    ``image``, and the metadata ranges its reading takes; ``None`` where the file does
    not parse (decoding it whole then names what is wrong)."""
    size = image.size
    image.fill([(max(0, size - BLOCK), size)], gap=0)
    image.log = []
    meta: list[Span] = [(max(0, size - BLOCK), size)]
    try:
        with zipfile.ZipFile(image) as zf:
            infos = npz_members(zf.infolist(), image.name)
    except (zipfile.BadZipFile, ValueError, EOFError, OSError, NotImplementedError):
        if image.error is not None:
            raise image.error from None
        return None
    finally:
        meta.extend(image.log or [])
        image.log = None
    data: dict[str, Any] = {}
    for key in infos if keys is None else keys:
        info = infos.get(key)
        if not isinstance(info, zipfile.ZipInfo):
            return None  # decoding names the missing member (or the key two names give)
        off = info.header_offset
        if off < 0 or off + 30 > size:
            return None
        local = bytes(image.at(off, 30))
        if local[:4] != b"PK\x03\x04":
            return None
        name_len, extra_len = struct.unpack_from("<HH", local, 26)
        start = off + 30 + name_len + extra_len
        end = start + info.compress_size
        meta.append((off, start))
        if end > size:
            return None
        whole = contiguous_rows(start, 0, info.compress_size)
        if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
            data[key] = whole  # deflated (or damaged): read whole, checked whole
            continue

        def at(a: int, n: int, start: int = start, end: int = end) -> memoryview:
            return image.at(start + a, max(0, min(n, end - start - a)))

        try:
            dtype, shape, fortran, offset = npy_header(at, f"{image.name}: member {key!r}")
        except FormatError:
            data[key] = whole
            continue
        meta.append((start, start + offset))
        rows = npy_layout(dtype, shape, fortran, start + offset)
        if rows is None or offset + rows[1] * rows[2] != info.file_size:
            data[key] = whole
        else:
            data[key] = contiguous_rows(*rows)
    # The zip's magic, which the decode checks: in the first member's local header, read
    # above where that member is picked, else now (left out, it read as zeros: the file
    # was refused as "not an NPZ (zip) file" until 2026-12-07).
    image.at(0, 4)
    meta.append((0, min(4, size)))
    return FileLayout(metadata=merge_ranges(meta), data=data)


class RangedNpz:
    """Sparse images of one source's NPZ files, read by rows (local or remote).

    ``files()``: the source's current listing; ``keys``: the members read (``None``:
    all); ``above``: files from this size up are read so.
    """

    def __init__(
        self,
        files: Callable[[], FileList],
        keys: Sequence[str] | None,
        in_flight: int,
        above: int,
    ) -> None:
        self._files = files
        self._keys = keys
        self.above = above
        self._lock = threading.Lock()
        # Layout and metadata bytes by file, least recently used first (META_BYTES).
        self._kept: OrderedDict[int, tuple[FileLayout | None, list[tuple[int, bytes]]]] = (
            OrderedDict()
        )
        self._kept_bytes = 0
        self._queue = LazyQueue(in_flight, "headrace-npz-rows")

    def applies(self, f: int) -> bool:
        """Whether file ``f`` is read by rows: at least ``above`` bytes."""
        return self._files().sizes[f] >= self.above

    def image(self, f: int, rows: NDArray[np.int64] | None) -> SparseImage:
        """File ``f``'s metadata and rows ``rows`` of each member read (``None``: the
        metadata only; the decode's :meth:`SparseImage.want` fetches the rows)."""
        files = self._files()
        if files.remote:
            fetch = files.fetch_ranges(f, self._queue.get(), cache_block=CACHE_BLOCK)
        else:
            fetch = files.local_ranges(f)
        image = SparseImage(files.sizes[f], fetch, files.name(f))
        want = np.empty(0, np.int64) if rows is None else rows
        with self._lock:
            kept = self._kept.get(f)
            if kept is not None:
                self._kept.move_to_end(f)
        if kept is not None:
            layout, meta = kept
            image.put(meta)
        else:
            layout = learn_npz(image, self._keys)
            meta = [] if layout is None else image.take(layout.metadata)
            self._keep(f, layout, meta)
        if layout is None:
            image.fill([(0, image.size)])  # decoding names what is wrong with it
        else:
            image.layout = layout
            image.want(want)
        return image

    def _keep(self, f: int, layout: FileLayout | None, meta: list[tuple[int, bytes]]) -> None:
        n = sum(len(b) for _, b in meta) + (0 if layout is None else layout.nbytes)
        with self._lock:
            if f in self._kept or n > META_BYTES:
                return
            self._kept[f] = (layout, meta)
            self._kept_bytes += n
            while self._kept_bytes > META_BYTES and len(self._kept) > 1:
                _, (old, old_meta) = self._kept.popitem(last=False)
                self._kept_bytes -= sum(len(b) for _, b in old_meta)
                self._kept_bytes -= 0 if old is None else old.nbytes

    def close(self) -> None:
        """Close the request queue (the layouts are kept: the files are the ones listed)."""
        self._queue.close()
