"""What crosses between a ring's worker processes and the main process.

The config each worker unpickles (:class:`RingConfig`), the pipe's message
kinds, and the slot layout: a chunk lies in its slot as regions (byte offset,
dtype, shape), each a contiguous copy of one array on a 64-byte boundary, and
each field is a strided view into one region, so ``x`` and ``y`` of a token
batch cross as their one ``(B, L + 1)`` stretch
(:func:`~headrace._pack.pack`), or, with ``contiguous=True``, apart. A field of
samples of several shapes (a 1-D ``object`` array of arrays, images of several
sizes) crosses as one region per sample, and is rebuilt as an ``object`` array
of views of them: raw bytes and shapes, not pickles.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._pack import pack
from headrace.errors import ConfigError
from headrace.pipeline import Batch, Source

__all__ = ["RingConfig"]

_LAYOUT, _CHUNK, _INLINE, _END, _ERROR, _STARTED = range(6)
_CHUNK_MSG = struct.Struct("<Bqii")  # kind, first step, steps, slot (+ a pickled layout)
_STARTED_MSG = struct.Struct("<Bq")  # kind, the run a worker has begun (persistent workers)
# Main -> worker: b"m" (the ring is mapped), a slot returned, or _RUN + a pickled
# (run, start, origin): start over there (persistent workers).
_SLOT_MSG = struct.Struct("<i")  # a slot returned to its worker
_RUN = b"r"
_ALIGN = 64  # each region starts on a cache line, and on any dtype's alignment

# A region's dtype: its string ("<f4"), or the dtype itself where the string drops a
# part of it (a structured dtype's fields: "|V12").
DtypeAt = str | np.dtype[Any]
# Where a chunk lies in its slot: regions (byte offset, dtype, shape), each a
# contiguous copy of one array; per field, (name, region, element offset, shape,
# element strides) into one of them; per field of samples of several shapes,
# (name, first region, samples, its place among the batch's keys): one region a
# sample, in order, after the other fields' regions.
Region = tuple[int, DtypeAt, tuple[int, ...]]
FieldAt = tuple[str, int, int, tuple[int, ...], tuple[int, ...]]
RaggedAt = tuple[str, int, int, int]
Layout = tuple[tuple[Region, ...], tuple[FieldAt, ...], tuple[RaggedAt, ...]]


@dataclass(frozen=True, kw_only=True, slots=True)
class RingConfig:
    """What each worker needs (picklable, torch-free): the source and its loader options."""

    source: Source
    loader: dict[str, Any] = field(default_factory=dict)  # Loader keyword arguments
    start: int = 0  # the first global step; worker w owns (t - start) % workers == w
    origin: tuple[int, int] | None = None  # the Loader's, after a change of batch size
    workers: int = 1
    slots: int = 4  # ring slots per worker, each a whole chunk of batches
    contiguous: bool = False  # copy each field apart, C-contiguous

    def __post_init__(self) -> None:
        if self.workers < 1 or self.slots < 2 or self.start < 0:
            raise ConfigError(
                f"need workers >= 1, slots >= 2 and start >= 0 (got workers={self.workers}, "
                f"slots={self.slots}, start={self.start})."
            )


def _nbytes(dtype: DtypeAt, shape: tuple[int, ...]) -> int:
    return int(np.dtype(dtype).itemsize * np.prod(shape, dtype=np.int64))


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of this shape."""
    out, n = [], 1
    for dim in reversed(shape):
        out.append(n)
        n *= dim
    return tuple(reversed(out))


def _layout(arrays: Batch, contiguous: bool) -> tuple[list[NDArray[Any]], Layout] | None:
    """The arrays to copy into a slot and where each field then lies (``None``: Python
    objects, which only pickling carries).

    Shared (the default): :func:`~headrace._pack.pack`'s bases, so ``x`` and
    ``y`` cross as their one ``(B, L + 1)`` stretch. ``contiguous``: each
    field is copied apart, C-contiguous. A field of samples of several shapes:
    each sample apart.
    """
    ragged = {k: a for k, a in arrays.items() if a.dtype.hasobject}
    if not all(_arrays_only(a) for a in ragged.values()):
        return None
    dense = {k: a for k, a in arrays.items() if k not in ragged}
    fields: tuple[FieldAt, ...]
    if contiguous:
        srcs = list(dense.values())
        fields = tuple(
            (name, i, 0, a.shape, _c_strides(a.shape)) for i, (name, a) in enumerate(dense.items())
        )
    else:
        srcs, packed = pack(dense)
        fields = tuple((name, *packed[name]) for name in dense)
    samples = []
    keys = list(arrays)
    for name, a in ragged.items():
        samples.append((name, len(srcs), len(a), keys.index(name)))
        srcs.extend(a)
    regions: list[Region] = []
    pos = 0
    for a in srcs:
        regions.append((pos, _dtype_at(a.dtype), a.shape))
        pos += _aligned(a.nbytes)
    return srcs, (tuple(regions), fields, tuple(samples))


def _dtype_at(dtype: np.dtype[Any]) -> DtypeAt:
    """How a region names ``dtype``: by its string where that makes the same dtype (a
    few bytes a region in each layout sent), else by itself (ml_dtypes' float8_e5m2 is
    "<f1", which NumPy makes nothing of)."""
    try:
        same = np.dtype(dtype.str) == dtype
    except TypeError:
        same = False
    return dtype.str if same else dtype


def _arrays_only(a: NDArray[Any]) -> bool:
    """Whether an ``object`` field is samples of several shapes that a slot can carry:
    1-D, each item an array of numbers (not strings or other Python objects)."""
    return a.ndim == 1 and all(isinstance(e, np.ndarray) and not e.dtype.hasobject for e in a)


def _size(regions: tuple[Region, ...]) -> int:
    """Bytes a chunk of this layout takes in a slot."""
    return sum(_aligned(_nbytes(d, sh)) for _, d, sh in regions)
