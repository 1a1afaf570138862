"""Fixed-width row matrices: ``.npy`` files, or raw ``.bin`` with a JSON sidecar.

Opening reads the header (or the sidecar) and the file size, never the rows:
a 300 GB matrix opens as fast as a 3 KB one. A raw file ``PATH`` is described
by ``PATH.json``, e.g. ``{"dtype": "uint16", "width": 1025}``; its row count
is the file size over the row size, which must divide it exactly.

Files may be object URLs (``s3://``, ``gs://``, ``az://``, ``http(s)://``,
``file://``): the header and sidecar are read by ranged GETs, and
:class:`RowReader` reads rows as ranged GETs (consecutive rows as one range,
cut into ``PIECE`` pieces), all in flight at once up to ``in_flight`` per
source, each checked against the size and ETag seen at open.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import itertools
import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import DTypeLike, NDArray

from headrace.errors import ConfigError, DataError, FormatError, ObjectNotFoundError, StorageError
from headrace.formats._file_list import is_object_url
from headrace.formats._file_walk import refuse_empty
from headrace.formats._npy import npy_header, refuse_npy_as_raw
from headrace.formats._object_files import (
    DEFAULT_IN_FLIGHT,
    ObjectFiles,
    RemoteFile,
    check_in_flight,
    check_store_options,
    wait_all,
)
from headrace.formats._ragged import check_width
from headrace.io import LocalFile, ObjectCache, RangeReader, ReaderConfig, Strategy, io_pool
from headrace.io._file import file_url_path
from headrace.io._mounts import local_cache_refused
from headrace.io._open_files import gone_error
from headrace.io._waits import result, wait_done

if TYPE_CHECKING:
    from headrace.io import ObjectStats

_READER_LOCK = threading.Lock()  # RowReader's lazy reader, stores and files, each made once

__all__ = [
    "ReaderSpec",
    "RowFile",
    "RowReader",
    "open_row_file",
    "write_row_file",
]

# The first GET of an object URL: an NPY header (128 bytes for a plain dtype) comes
# with the object's size and ETag, so no HEAD is needed.
_FIRST = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class RowFile:
    """A validated ``(rows, width)`` matrix in a file.

    Row ``i`` starts at byte ``offset + i * stride``.
    """

    path: str
    dtype: np.dtype[Any]
    rows: int
    width: int
    offset: int
    format: str  # "npy" | "raw"
    etag: str | None = None  # an object's entity tag when opened (object URLs)
    #: a local file's (device, inode) when opened: its reads must come from that file
    identity: tuple[int, int] | None = None

    @property
    def stride(self) -> int:
        """Bytes from one row to the next."""
        return self.width * self.dtype.itemsize

    def fingerprint(self) -> dict[str, Any]:
        return {
            "path": os.path.basename(self.path),
            "dtype": self.dtype.str,
            "rows": self.rows,
            "width": self.width,
            "format": self.format,
        }


#: dtype kinds a sidecar may give rows: integers, bool and floats (NumPy's kind letters).
_ROW_KINDS = "biuf"


def _sidecar(path: str) -> str:
    return path + ".json"


@dataclass(frozen=True, slots=True)
class _Opened:
    """A file being opened, local or remote: its name, size, first bytes and sidecar."""

    path: str
    size: int
    head: Callable[[int], bytes]  # the first n bytes (fewer at the end of the file)
    sidecar: Callable[[], bytes | None]  # PATH.json's bytes, None when there is none


def _read_head(f: _Opened, n: int) -> memoryview:
    return memoryview(f.head(min(n, f.size)))


def _open_npy(f: _Opened) -> RowFile:
    # The header's parser refuses what is no NPY file, and names one cut short (inside
    # its magic too) as truncated.
    dtype, shape, fortran, offset = npy_header(lambda off, n: _read_head(f, off + n)[off:], f.path)
    if len(shape) != 2:
        # (groups, k, width): a retrieval dataset's k hard negatives saved as one array.
        split = (
            f"; a (groups, k, width) array of k lists a group (hard negatives) is k members "
            f"of PairRows, a file each: np.save(f'neg{{j}}.npy', a[:, j]) for j in "
            f"range({shape[1]}), with optional= naming those a group may lack (all padding)"
            if len(shape) == 3
            else ""
        )
        raise FormatError(
            f"{f.path}: expected a 2-D (rows, width) array, found shape {shape}{split}"
        )
    if fortran and shape[0] > 1 and shape[1] > 1:
        raise FormatError(
            f"{f.path}: the array is stored in Fortran (column-major) order, so a row is not "
            "contiguous; save it with np.save(path, np.ascontiguousarray(a))"
        )
    rows, width = shape
    want = offset + rows * width * dtype.itemsize
    if f.size != want:
        what = "truncated" if f.size < want else "corrupt (trailing bytes)"
        raise FormatError(
            f"{f.path}: {what}: header says {rows} x {width} {dtype} ({want} bytes with the "
            f"header), found {f.size} bytes"
        )
    return RowFile(path=f.path, dtype=dtype, rows=rows, width=width, offset=offset, format="npy")


def _open_raw(f: _Opened, dtype: DTypeLike | None, width: int | None) -> RowFile:
    if width is not None:  # a NumPy integer too (a width NumPy worked out), as an int
        try:
            width = check_width(width, 1)
        except ValueError as exc:
            raise ConfigError(f"{f.path}: width= {exc}") from exc
    refuse_npy_as_raw(
        lambda offset, n: _read_head(f, offset + n)[offset:],
        f.path,
        "rows",
        "Rename it to end in .npy (np.lib.format.open_memmap and np.save to an open file "
        "write NPY whatever the name)",
    )
    _refuse_npz(f)
    side = _sidecar(f.path)
    meta: dict[str, Any] = {}
    text = f.sidecar()
    if text is not None:
        try:
            meta = json.loads(text)
            if not isinstance(meta, dict):
                raise TypeError(f"found a {type(meta).__name__}")
        except (OSError, ValueError, TypeError, RecursionError) as exc:
            raise FormatError(
                f'{side}: unreadable row sidecar (expected JSON like {{"dtype": "uint16", '
                f'"width": 1025}}): {exc}'
            ) from exc
    # The sidecar's own values are checked before any comparison with the
    # arguments, so a bad sidecar is named as such whatever was passed.
    if "dtype" in meta:
        side_dtype = _dtype_or_raise(meta["dtype"], side, FormatError)
        if side_dtype.kind not in _ROW_KINDS:
            raise FormatError(
                f"{side}: dtype {meta['dtype']!r} ({side_dtype}) is not a dtype of rows "
                '(expected an integer, bool or float type, e.g. "uint16")'
            )
    if "width" in meta:
        _width_or_raise(meta["width"], side)
    side_rows = meta.get("rows")
    if side_rows is not None and (
        isinstance(side_rows, bool) or not isinstance(side_rows, int) or side_rows < 0
    ):
        raise FormatError(f"{side}: rows must be a non-negative integer (got {side_rows!r})")
    got_dtype = dtype if dtype is not None else meta.get("dtype")
    got_width = width if width is not None else meta.get("width")
    if got_dtype is None or got_width is None:
        raise ConfigError(
            f"{f.path}: a raw row file needs a dtype and a width: pass dtype= and width= or "
            f'write {side} with {{"dtype": ..., "width": ...}}'
        )
    dt = _dtype_or_raise(got_dtype, f.path, ConfigError)
    if dt.hasobject:
        raise FormatError(
            f"{f.path}: dtype {dt} holds Python objects, which raw bytes cannot store; "
            "use an integer dtype"
        )
    if dtype is not None and "dtype" in meta and dt != side_dtype:
        raise ConfigError(f"{f.path}: dtype {dt} given but {side} says {meta['dtype']}")
    if width is not None and "width" in meta and meta["width"] != width:
        raise ConfigError(f"{f.path}: width {width} given but {side} says {meta['width']}")
    _width_or_raise(got_width, side)
    row_bytes = got_width * dt.itemsize
    said = [k for k, arg in (("width", width), ("dtype", dtype)) if arg is None and k in meta]
    # A width or dtype the sidecar gave may be the sidecar's fault: name it too.
    source = f", {' and '.join(said)} from {side}" if said else ""
    if f.size % row_bytes:
        raise DataError(
            f"{f.path}: file size {f.size} is not a multiple of the row size {row_bytes} "
            f"({got_width} x {dt}{source}): wrong width or dtype, or a truncated file"
        )
    rows = f.size // row_bytes
    if side_rows is not None and side_rows != rows:
        # What the size alone cannot catch: a wrong dtype or width that still divides it.
        raise DataError(
            f"{f.path}: {side} says {side_rows} rows, but {f.size} bytes hold {rows} rows of "
            f"{got_width} x {dt}: a wrong width or dtype, or a truncated or extended file"
        )
    return RowFile(path=f.path, dtype=dt, rows=rows, width=got_width, offset=0, format="raw")


def _refuse_npz(f: _Opened) -> None:
    """Refuse an NPZ archive (``np.savez``) about to be read as raw rows: asked for a
    sidecar, a user gave it one, and its zip and NPY headers were read as token ids. Raw
    rows that merely start like a zip (uint8 ids 80, 75, 3, 4) pass: an archive's first
    member is named ``*.npy``."""
    head = bytes(_read_head(f, 30 + 256))
    if head[:4] != b"PK\x03\x04" or len(head) < 30:
        return
    name = head[30 : 30 + int.from_bytes(head[26:28], "little")]
    if not name.endswith(b".npy"):
        return
    first = name[:-4].decode("utf-8", "replace")
    raise FormatError(
        f"{f.path}: an NPZ archive (a zip of .npy arrays, as np.savez writes; its first is "
        f"{first!r}), not raw rows: its zip and NPY headers would be read as rows. A row "
        "file holds one matrix: save each array as its own .npy (z = np.load(path); "
        "np.save(f'{k}.npy', z[k]) for k in z.files) and give those files, e.g. "
        "{'query': ('query.npy', 'query_mask.npy'), 'pos': 'pos.npy'}"
    )


def _dtype_or_raise(value: Any, where: str, error: type[Exception]) -> np.dtype[Any]:
    try:
        dt: np.dtype[Any] = np.dtype(value)
    except (TypeError, ValueError) as exc:
        raise error(f"{where}: {value!r} is not a dtype") from exc
    if dt.itemsize == 0 or dt.subdtype is not None:
        # "S0" sized rows of 0 bytes (a ZeroDivisionError); "(2,)u2" or "5i2" a row of
        # arrays, whose width is not the width given.
        raise error(
            f"{where}: dtype {value!r} ({dt}) is not a dtype of rows: "
            + ("its items have 0 bytes" if dt.itemsize == 0 else "each item is an array")
        )
    return dt


def _width_or_raise(value: Any, side: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FormatError(f"{side}: width must be a positive integer (got {value!r})")


def _local_sidecar(path: str) -> bytes | None:
    side = _sidecar(path)
    if not os.path.exists(side):
        return None
    try:
        with open(side, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise FormatError(f"{side}: unreadable row sidecar: {exc}") from exc


def _local_head(f: LocalFile) -> Callable[[int], bytes]:
    def head(n: int) -> bytes:
        buf = np.empty(n, dtype=np.uint8)
        f.pread_into(buf, 0)
        return buf.tobytes()

    return head


def open_row_file(
    path: str | os.PathLike[str],
    *,
    dtype: DTypeLike | None = None,
    width: int | None = None,
    store_options: Mapping[str, Any] | None = None,
) -> RowFile:
    """Describe a row matrix after checking its header; reads no rows.

    ``.npy`` files describe themselves; anything else is raw, with ``dtype``
    and ``width`` from the arguments or the ``PATH.json`` sidecar. An object
    URL is opened with ``store_options`` (see :class:`~headrace.io.ObjectStore`).
    """
    p = os.fspath(path)
    refuse_empty([p], "a row file", "the row file's path or object URL")
    if not is_object_url(p):
        check_store_options(store_options, remote=False, where=p)
        with LocalFile(p) as f:  # raises ObjectNotFoundError naming the path
            opened = _Opened(p, f.size, _local_head(f), lambda: _local_sidecar(p))
            rf = _open_any(opened, dtype, width)
            return _nonempty(dataclasses.replace(rf, identity=f.identity))
    files = ObjectFiles(check_store_options(store_options, remote=True), name="headrace-rows")
    try:
        return _open_remote(p, dtype, width, files)
    finally:
        files.close()


def _open_remote(p: str, dtype: DTypeLike | None, width: int | None, files: ObjectFiles) -> RowFile:
    """:func:`open_row_file` of an object URL through ``files`` (a reader's, or its own).

    One GET reads the first bytes (an NPY header) with the object's size and
    ETag; a raw file's sidecar is one more.
    """
    first, info = files.read_start(p, _FIRST)  # ObjectNotFoundError etc. name the URL

    def head(n: int) -> bytes:
        if n <= len(first):
            return bytes(first[:n])
        buf = np.empty(n, dtype=np.uint8)  # a header longer than the first GET
        result(files.open(p, info.size, info.etag).read_into(buf, 0))
        return buf.tobytes()

    opened = _Opened(p, info.size, head, lambda: files.read(_sidecar(p)))
    return _nonempty(dataclasses.replace(_open_any(opened, dtype, width), etag=info.etag))


def _nonempty(rf: RowFile) -> RowFile:
    if rf.rows == 0:
        raise DataError(f"{rf.path}: empty: the matrix has no rows")
    if rf.width == 0:
        raise DataError(f"{rf.path}: empty: rows have no columns (shape ({rf.rows}, 0))")
    return rf


def _open_any(f: _Opened, dtype: DTypeLike | None, width: int | None) -> RowFile:
    if f.path.lower().endswith(".npy"):  # ROWS.NPY too: Windows tools, old scripts
        if dtype is not None or width is not None:
            raise ConfigError(f"{f.path}: an .npy file carries its own dtype and width")
        return _open_npy(f)
    return _open_raw(f, dtype, width)


def write_row_file(path: str | os.PathLike[str], rows: NDArray[Any]) -> RowFile:
    """Write a 2-D array as ``.npy`` (when ``path`` ends so) or raw bytes plus ``PATH.json``;
    ``path`` may be a ``file://`` URL (then opened as one), not another object URL."""
    p = local = os.fspath(path)
    if is_object_url(p):
        if not p.startswith("file://"):
            raise ConfigError(
                f"{p}: write_row_file writes local files (a path or a file:// URL), not "
                "objects: write it to a local path, then copy it (and a raw file's PATH.json "
                "sidecar) to the store with its own tools, e.g. aws s3 cp"
            )
        local = file_url_path(p)
    a = np.ascontiguousarray(rows)
    if a.ndim != 2:
        raise ConfigError(f"{p}: rows must be a 2-D array (got shape {a.shape})")
    # Checked before writing: what open_row_file refuses would replace the old file first.
    if 0 in a.shape:
        what = "0 rows" if a.shape[0] == 0 else "rows of 0 columns"
        raise ConfigError(
            f"{p}: rows must hold at least one row of at least one column (got {what}, shape "
            f"{a.shape}); no reader opens an empty row file: leave the file out instead"
        )
    npy = p.lower().endswith(".npy")
    if not npy and (a.dtype.kind not in _ROW_KINDS or a.dtype.hasobject):
        raise ConfigError(
            f"{p}: dtype {a.dtype} cannot be written as raw rows, whose sidecar takes an "
            "integer, bool or float type (e.g. uint16); convert the rows, or write .npy"
        )
    if npy:
        _replace([(local, lambda fh: np.save(fh, a))])
    else:
        name = a.dtype.name if a.dtype.isnative else a.dtype.str  # '>u2' kept: not native
        meta = {"dtype": name, "width": int(a.shape[1]), "rows": int(a.shape[0])}
        # The sidecar renamed first: a reader between the two renames sees the new row
        # count beside the old rows, a size it refuses, never a half-written file.
        _replace(
            [(_sidecar(local), lambda fh: fh.write(json.dumps(meta).encode())), (local, a.tofile)]
        )
    return open_row_file(p)


def _replace(files: list[tuple[str, Callable[[Any], object]]]) -> None:
    """Write each ``(path, write)`` whole or not at all: all into temporary files beside
    them, then each renamed over its path. A reader opening them meanwhile sees the old
    files; a write that fails (a full disk) leaves them as they were."""
    done: list[tuple[str, str]] = []
    path = files[0][0]
    try:
        for path, write in files:
            tmp = f"{path}.{os.getpid()}.tmp"
            done.append((tmp, path))
            with open(tmp, "wb") as fh:
                write(fh)
        for tmp, path in done:
            os.replace(tmp, path)
    except OSError as exc:
        for tmp, _ in done:
            with contextlib.suppress(OSError):
                os.remove(tmp)
        # The temporary file's name is no name the caller gave.
        where = os.path.dirname(path) or "."
        hint = f" (is there a folder {where}?)" if isinstance(exc, FileNotFoundError) else ""
        raise StorageError(
            exc.errno, f"{path}: cannot write the row file: {exc.strerror or exc}{hint}"
        ) from exc
    except BaseException:
        for tmp, _ in done:
            with contextlib.suppress(OSError):
                os.remove(tmp)
        raise


ReaderSpec = RangeReader | ReaderConfig | Strategy


class RowReader:
    """Reads rows of :class:`RowFile` matrices through one :class:`RangeReader`.

    Every file of a source shares the reader (its open files and adaptive
    state) and the process-wide I/O pool. A reader passed in is borrowed
    and never closed here; one made from a config or strategy name is owned.
    Files at object URLs are opened (:meth:`open`) and read by ranged GETs
    instead, on one set of stores (``store_options``, at most ``in_flight``
    GETs at once). Pickled copies (worker processes) open their own.
    """

    def __init__(
        self,
        spec: ReaderSpec = "adaptive",
        *,
        store_options: Mapping[str, Any] | None = None,
        in_flight: int = DEFAULT_IN_FLIGHT,
        cache: ObjectCache | None = None,
    ) -> None:
        self._in_flight = check_in_flight(in_flight)
        self.cache = cache
        # Checked here, refused for a local file when it is opened.
        self._store_options = check_store_options(store_options, remote=True)
        self._given = spec if isinstance(spec, RangeReader) else None
        # A strategy name is checked now, not at the first read.
        self._config = (
            spec.config
            if isinstance(spec, RangeReader)
            else spec
            if isinstance(spec, ReaderConfig)
            else ReaderConfig(strategy=spec)
        )
        self._reader: RangeReader | None = self._given
        self._objects: ObjectFiles | None = None
        self._remote: dict[str, RemoteFile] = {}

    def open(self, f: str | os.PathLike[str] | RowFile) -> RowFile:
        """``f`` itself if opened already, else :func:`open_row_file` of it (dtype and
        width from the file); an object URL through this reader's stores, whose
        ``object_stats`` then count the GETs that opened it."""
        if isinstance(f, RowFile):
            return f
        p = os.fspath(f)
        if not is_object_url(p):
            if self.cache is not None:
                raise local_cache_refused(f"{p}", [p])
            return open_row_file(p, store_options=self._store_options)
        return _open_remote(p, None, None, self._files())

    def _files(self) -> ObjectFiles:
        objects = self._objects
        if objects is None:
            with _READER_LOCK:
                if self._objects is None:
                    self._objects = ObjectFiles(
                        self._store_options,
                        self._in_flight,
                        name="headrace-rows",
                        cache=self.cache,
                    )
                objects = self._objects
        return objects

    @property
    def reader(self) -> RangeReader:
        r = self._reader
        if r is None:
            with _READER_LOCK:  # two first reads at once must not each open the files
                r = self._reader
                if r is None:
                    r = self._reader = RangeReader(self._config)
        return r

    def read(
        self,
        f: RowFile,
        rows: NDArray[np.int64],
        cols: int | None = None,
        *,
        out: NDArray[Any] | None = None,
    ) -> NDArray[Any]:
        """Rows ``rows`` of ``f`` (their first ``cols`` columns) as one ``(N, cols)`` array.

        With ``out`` (C-contiguous, ``(N, cols)``, any dtype of ``f``'s item
        size) the bytes land there directly: no copy after the read.
        """
        cols = f.width if cols is None else cols
        n = len(rows)
        isz = f.dtype.itemsize
        if out is None:
            out = np.empty((n, cols), dtype=f.dtype)
        raw = out.view(np.uint8).reshape(n, cols * isz)
        if not is_object_url(f.path):
            self._check_same(f)
            self.reader.read_rows(f.path, rows, cols * isz, base=f.offset, stride=f.stride, out=raw)
            return out
        if n == 0:
            return out
        # Runs of consecutive rows (whole rows only) are one range each.
        r = np.asarray(rows, dtype=np.int64)
        whole = cols * isz == f.stride
        cut = np.flatnonzero(np.diff(r) != 1) + 1 if whole and n > 1 else np.arange(1, n)
        ranges, bufs = [], []
        for a, b in itertools.pairwise([0, *cut.tolist(), n]):
            ranges.append(
                (f.offset + int(r[a]) * f.stride, (b - a) * f.stride if whole else cols * isz)
            )
            bufs.append(raw[a:b].reshape(-1))
        self.read_into(f, ranges, bufs)
        return out

    def read_into(
        self, f: RowFile, ranges: Sequence[tuple[int, int]], bufs: Sequence[NDArray[np.uint8]]
    ) -> None:
        """Fill each buffer with the bytes of its ``(offset, length)`` range of ``f``.

        Local files go through the :class:`RangeReader`'s strategy; object URLs
        as ranged GETs of at most ``PIECE`` bytes, all started before any is
        waited on, all finished before the first error is raised.
        """
        if not is_object_url(f.path):
            self._check_same(f)
            self.reader.read_into(f.path, list(ranges), list(bufs))
            return
        remote = self._remote_file(f)
        futures: list[Future[None]] = []
        for (offset, length), buf in zip(ranges, bufs, strict=True):
            futures += remote.read_pieces(buf[:length], offset)
        wait_all(futures)

    def _check_same(self, f: RowFile) -> None:
        """Refuse to read ``f`` from a file other than the one opened (and described).

        A held descriptor reads on in the file it opened, but this reader's files
        are opened anew after :meth:`close` (each epoch of a ``TorchDataset``, a
        new loader over the source) and in a worker's copy: a file renamed over
        the path was read there as the new version, in the same run and epoch.
        The reader checks its own reopens against its first open, which this
        checks against the source's. Size and mtime are not compared, as the
        reader does not (see :class:`~headrace.io._open_files.OpenFiles`).
        """
        if f.identity is None:
            return
        try:
            now = self.reader.file(f.path).identity
        except ObjectNotFoundError as exc:
            raise gone_error(f.path, "source") from exc
        if now != f.identity:
            raise StorageError(
                errno.ESTALE,
                f"{f.path}: the file was replaced since the source opened it (device "
                f"{f.identity[0]}, inode {f.identity[1]} then; device {now[0]}, inode "
                f"{now[1]} now); open a new source to read the new file",
            )

    def _remote_file(self, f: RowFile) -> RemoteFile:
        remote = self._remote.get(f.path)
        if remote is None:
            files = self._files()
            with _READER_LOCK:
                remote = self._remote.get(f.path)
                if remote is None:
                    size = f.offset + f.rows * f.stride
                    remote = self._remote[f.path] = files.open(f.path, size, f.etag)
        return remote

    @property
    def object_stats(self) -> ObjectStats | None:
        """GETs, bytes and latencies of the files at object URLs, opening them included
        (``None`` until one is opened or read)."""
        return None if self._objects is None else self._objects.stats()

    def read_many(
        self, jobs: list[tuple[RowFile, NDArray[np.int64], int | None, NDArray[Any] | None]]
    ) -> list[NDArray[Any]]:
        """Several files' rows at once: all but the first start on the I/O pool.

        Every read finishes before the first error is raised (a failed read
        never leaves another one writing into a buffer we hand back).
        """
        if len(jobs) == 1:
            f, rows, cols, out = jobs[0]
            return [self.read(f, rows, cols, out=out)]
        futures = [
            io_pool().submit(self.read, f, rows, cols, out=out) for f, rows, cols, out in jobs[1:]
        ]
        # The engine's batches let the caller finish a read alone, so running
        # inside the pool cannot deadlock when the pool is busy.
        first: list[NDArray[Any]] = []
        error: BaseException | None = None
        try:
            f, rows, cols, out = jobs[0]
            first.append(self.read(f, rows, cols, out=out))
        except BaseException as exc:  # raised after the others finish
            error = exc
        try:
            wait_done(futures)
        except BaseException:
            # Interrupted (Ctrl-C): a read still running writes into a buffer we hand
            # back, and after the caller's close() would reopen its file. Those not
            # started are cancelled; the others are waited for, as for any failure.
            wait_done([f for f in futures if not f.cancel()])
            raise
        for fut in futures:
            exc2 = fut.exception()
            if exc2 is not None and error is None:
                error = exc2
        if error is not None:
            raise error
        return first + [fut.result() for fut in futures]

    def close(self) -> None:
        if self._reader is not None and self._given is None:
            self._reader.close()
        self._reader = self._given
        if self._objects is not None:
            self._objects.close()  # reopened on the next read
        self._remote = {}

    def __getstate__(self) -> dict[str, Any]:
        return {
            "config": self._config,
            "store_options": self._store_options,
            "in_flight": self._in_flight,
            "cache": self.cache,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["config"],
            store_options=state["store_options"],
            in_flight=state["in_flight"],
            cache=state["cache"],
        )
