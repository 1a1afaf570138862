"""Fixed-width row matrices on disk: ``.npy`` files, or raw ``.bin`` with a JSON sidecar.

Opening reads the header (or the sidecar) and the file size, never the rows:
a 300 GB matrix opens as fast as a 3 KB one. A raw file ``PATH`` is described
by ``PATH.json``, e.g. ``{"dtype": "uint16", "width": 1025}``; its row count
is the file size over the row size, which must divide it exactly.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from concurrent.futures import wait
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import DTypeLike, NDArray

from headrace.errors import ConfigError, DataError, FormatError
from headrace.formats._npy import _parse_npy_header
from headrace.io import LocalFile, RangeReader, ReaderConfig, Strategy, io_pool

_READER_LOCK = threading.Lock()  # RowReader's lazy reader, made once

__all__ = ["ReaderSpec", "RowFile", "RowReader", "open_row_file", "write_row_file"]

_NPY_MAGIC = b"\x93NUMPY"


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


def _sidecar(path: str) -> str:
    return path + ".json"


def _read_head(f: LocalFile, n: int) -> memoryview:
    buf = np.empty(min(n, f.size), dtype=np.uint8)
    f.pread_into(buf, 0)
    return memoryview(buf.tobytes())


def _open_npy(f: LocalFile) -> RowFile:
    head = _read_head(f, 12)
    if bytes(head[:6]) != _NPY_MAGIC:
        raise FormatError(f"{f.path}: not an NPY file: starts with {bytes(head[:6])!r}")
    if len(head) < 10:
        raise FormatError(f"{f.path}: truncated: {f.size} bytes, shorter than an NPY header")
    major = head[6]
    hlen = (
        struct.unpack_from("<H", head, 8)[0]
        if major == 1
        else struct.unpack_from("<I", head, 8)[0]
        if len(head) >= 12
        else 0
    )
    head = _read_head(f, (10 if major == 1 else 12) + hlen)
    dtype, shape, fortran, offset = _parse_npy_header(head, f.path)
    if len(shape) != 2:
        raise FormatError(f"{f.path}: expected a 2-D (rows, width) array, found shape {shape}")
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


def _open_raw(f: LocalFile, dtype: DTypeLike | None, width: int | None) -> RowFile:
    side = _sidecar(f.path)
    meta: dict[str, Any] = {}
    if os.path.exists(side):
        try:
            with open(side, encoding="utf-8") as fh:
                meta = json.load(fh)
            if not isinstance(meta, dict):
                raise TypeError(f"found a {type(meta).__name__}")
        except (OSError, ValueError, TypeError) as exc:
            raise FormatError(
                f'{side}: unreadable row sidecar (expected JSON like {{"dtype": "uint16", '
                f'"width": 1025}}): {exc}'
            ) from exc
    # The sidecar's own values are checked before any comparison with the
    # arguments, so a bad sidecar is named as such whatever was passed.
    if "dtype" in meta:
        side_dtype = _dtype_or_raise(meta["dtype"], side, FormatError)
    if "width" in meta:
        _width_or_raise(meta["width"], side)
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
    if f.size % row_bytes:
        raise DataError(
            f"{f.path}: file size {f.size} is not a multiple of the row size {row_bytes} "
            f"({got_width} x {dt}): wrong width or dtype, or a truncated file"
        )
    return RowFile(
        path=f.path, dtype=dt, rows=f.size // row_bytes, width=got_width, offset=0, format="raw"
    )


def _dtype_or_raise(value: Any, where: str, error: type[Exception]) -> np.dtype[Any]:
    try:
        dt: np.dtype[Any] = np.dtype(value)
    except (TypeError, ValueError) as exc:
        raise error(f"{where}: {value!r} is not a dtype") from exc
    return dt


def _width_or_raise(value: Any, side: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FormatError(f"{side}: width must be a positive integer (got {value!r})")


def open_row_file(
    path: str | os.PathLike[str], *, dtype: DTypeLike | None = None, width: int | None = None
) -> RowFile:
    """Describe a row matrix after checking its header; reads no rows.

    ``.npy`` files describe themselves; anything else is raw, with ``dtype``
    and ``width`` from the arguments or the ``PATH.json`` sidecar.
    """
    p = os.fspath(path)
    with LocalFile(p) as f:  # raises ObjectNotFoundError naming the path
        if p.endswith(".npy"):
            if dtype is not None or width is not None:
                raise ConfigError(f"{p}: an .npy file carries its own dtype and width")
            rf = _open_npy(f)
        else:
            rf = _open_raw(f, dtype, width)
    if rf.rows == 0:
        raise DataError(f"{p}: empty: the matrix has no rows")
    if rf.width == 0:
        raise DataError(f"{p}: empty: rows have no columns (shape ({rf.rows}, 0))")
    return rf


def write_row_file(path: str | os.PathLike[str], rows: NDArray[Any]) -> RowFile:
    """Write a 2-D array as ``.npy`` (when ``path`` ends so) or raw bytes plus ``PATH.json``."""
    p = os.fspath(path)
    a = np.ascontiguousarray(rows)
    if a.ndim != 2:
        raise ConfigError(f"{p}: rows must be a 2-D array (got shape {a.shape})")
    if p.endswith(".npy"):
        np.save(p, a)
    else:
        a.tofile(p)
        with open(_sidecar(p), "w", encoding="utf-8") as fh:
            # A non-native byte order is kept ('>u2'); "uint16" would mean native.
            name = a.dtype.name if a.dtype.isnative else a.dtype.str
            json.dump({"dtype": name, "width": int(a.shape[1])}, fh)
    return open_row_file(p)


ReaderSpec = RangeReader | ReaderConfig | Strategy


class RowReader:
    """Reads rows of :class:`RowFile` matrices through one :class:`RangeReader`.

    Every file of a source shares the reader (its open files and adaptive
    state) and the process-wide I/O pool. A reader passed in is borrowed
    and never closed here; one made from a config or strategy name is owned.
    Pickled copies (worker processes) open their own.
    """

    def __init__(self, spec: ReaderSpec = "adaptive") -> None:
        self._given = spec if isinstance(spec, RangeReader) else None
        self._config = spec.config if isinstance(spec, RangeReader) else spec
        self._reader: RangeReader | None = self._given

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
        self.reader.read_rows(f.path, rows, cols * isz, base=f.offset, stride=f.stride, out=raw)
        return out

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
        wait(futures)
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

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self._config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._given = None
        self._config = state["config"]
        self._reader = None
