"""Bytes-like inputs, seen as one flat read-only byte view."""

from __future__ import annotations

import errno
import io
import mmap
from typing import TypeAlias

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError

__all__ = ["Buffer", "BufferReader", "SeekableFile", "as_bytes_view"]

#: What the decoders accept: anything holding the whole file's bytes contiguously.
Buffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap | NDArray[np.uint8]


def as_bytes_view(data: Buffer, name: str) -> memoryview:
    """A flat ``B``-format memoryview of ``data`` (no copy)."""
    try:
        view = memoryview(data)  # type: ignore[arg-type]  # mmap/ndarray are buffers
    except TypeError as exc:
        raise ConfigError(
            f"{name}: expected a bytes-like object (bytes, memoryview, uint8 array), "
            f"got {type(data).__name__}"
        ) from exc
    if not view.c_contiguous:
        raise ConfigError(f"{name}: the byte buffer must be contiguous")
    return view.cast("B") if (view.format != "B" or view.ndim != 1) else view


class SeekableFile(io.RawIOBase):
    """A read-only file of ``size`` bytes with a position: what zipfile and h5py need
    besides ``readinto`` (which a subclass gives)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence {whence}")
        if base + offset < 0:
            # OSError, as a real file gives (EINVAL): zipfile probes for a zip64 record
            # before the start of a small archive and expects exactly that.
            raise OSError(errno.EINVAL, f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos


class BufferReader(SeekableFile):
    """A seekable read-only file over a memoryview.

    ``io.BytesIO`` copies anything that is not ``bytes``; zipfile and h5py
    only need ``read``/``readinto``/``seek``/``tell``, so this serves them
    from the caller's buffer and copies only what they ask for.
    """

    def __init__(self, view: memoryview) -> None:
        super().__init__(len(view))
        self._view = view

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        out = memoryview(buffer).cast("B")
        start = min(self._pos, len(self._view))
        n = min(len(out), len(self._view) - start)
        out[:n] = self._view[start : start + n]
        self._pos = start + n
        return n
