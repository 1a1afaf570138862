"""What crosses between a ring's worker processes and the main process.

The config each worker unpickles (:class:`RingConfig`), the pipe's message
kinds, and the slot layout: a chunk lies in its slot as regions (byte offset,
dtype, shape), each a contiguous copy of one array on a 64-byte boundary, and
each field is a strided view into one region, so ``x`` and ``y`` of a token
batch cross as their one ``(B, L + 1)`` stretch
(:func:`~headrace._pack.pack`), or, with ``contiguous=True``, apart. A field of
samples of several shapes (a 1-D ``object`` array of arrays, images of several
sizes) crosses as one region per sample, and is rebuilt as an ``object`` array
of views of them: raw bytes and shapes, not pickles. A masked array crosses as its
data and its mask, each a field, and is rebuilt with its fill value and hardness; a
record array or a matrix as its plain array, viewed as such again. A field of another
subclass of ``ndarray`` (or samples that are not plain arrays) is pickled, which keeps
what it is.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._pack import Field, pack
from headrace._stacking import PLAIN
from headrace.errors import ConfigError
from headrace.pipeline import Batch, Source
from headrace.pipeline._stall import Running

__all__ = ["RingConfig"]

_LAYOUT, _CHUNK, _INLINE, _END, _ERROR, _STARTED, _NOTES = range(7)
_CHUNK_MSG = struct.Struct("<Bqii")  # kind, first step, steps, slot (+ a pickled layout)
_STARTED_MSG = struct.Struct("<Bq")  # kind, the run a worker has begun (persistent workers)
# _NOTES + a pickled take_corrupt_news(): the corrupt files a worker met, before the chunk
# (or error) they were met for.
# Main -> worker: b"m" (the ring is mapped), a slot returned, or _RUN + a pickled
# (run, start, origin): start over there (persistent workers).
_SLOT_MSG = struct.Struct("<i")  # a slot returned to its worker
_RUN = b"r"
_ALIGN = 64  # each region starts on a cache line, and on any dtype's alignment
# What a worker runs now (:class:`Doing`): a count of its changes (odd while one is being
# written), the start (time.monotonic(): one clock for every process), first and last
# step, the name's bytes; then the name, UTF-8.
_DOING = struct.Struct("<qdqqq")
_DOING_BYTES = 256

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
# Per field NumPy gives as a subclass (:data:`_VIEWED`, or a masked array): (name, its
# class, its mask (a field of the masked field's name; None: no mask at all), its fill
# value (raw bytes and dtype; None: NumPy's default), whether its mask is hard).
SubAt = tuple[str, type[Any], FieldAt | None, tuple[bytes, DtypeAt] | None, bool]
Layout = tuple[tuple[Region, ...], tuple[FieldAt, ...], tuple[RaggedAt, ...], tuple[SubAt, ...]]

# Subclasses that a view of the plain array makes again (a record array's attribute
# access, a matrix's products). A memory map's bytes are copied as a plain array's
# (:data:`~headrace._stacking.PLAIN`): it comes out a plain array, as its sums are.
_VIEWED = (np.recarray, np.matrix)


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


class Doing:
    """The transform or Mapped fn a worker runs now, which the main process's stall
    warning names (where the training loop waits: it named the worker and asked "stalled
    storage?", and only the worker's own warning, on its stderr, named it). A block of
    ``multiprocessing``'s shared heap, made by the main process, handed to the worker with
    its start (as its pipes are), written by the worker as what it runs changes
    (:func:`~headrace.pipeline._stall.running`): a count odd while being written, read
    again until it holds still."""

    def __init__(self, ctx: Any) -> None:
        self.block = ctx.RawArray("B", _DOING_BYTES)

    def tell(self, now: Running | None) -> None:
        """In the worker: ``now`` runs (``None``: nothing)."""
        cells = memoryview(self.block).cast("B")
        count = _DOING.unpack_from(cells)[0]
        _DOING.pack_into(cells, 0, count + 1, 0.0, -1, -1, 0)  # odd: being written
        if now is None:
            _DOING.pack_into(cells, 0, count + 2, 0.0, -1, -1, 0)
            return
        what, first, last, t0 = now
        name = what.encode()[: _DOING_BYTES - _DOING.size]
        cells[_DOING.size : _DOING.size + len(name)] = name
        _DOING.pack_into(cells, 0, count + 2, t0, first, last, len(name))

    def started(self) -> bool:
        """In the main process: whether the worker's own code has begun (it tells at once),
        which comes after its import of the main module; a worker still importing it, stuck
        in the script's unguarded top-level code, has not."""
        return bool(_DOING.unpack_from(memoryview(self.block).cast("B"))[0])

    def now(self) -> Running | None:
        """In the main process: what the worker runs (``None``: nothing, or it would not
        hold still)."""
        cells = memoryview(self.block).cast("B")
        for _ in range(100):
            count, t0, first, last, n = _DOING.unpack_from(cells)
            name = bytes(cells[_DOING.size : _DOING.size + n])
            if count % 2 == 0 and _DOING.unpack_from(cells)[0] == count:
                return None if n == 0 else (name.decode(errors="replace"), first, last, t0)
        return None


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
    objects, or a subclass of ``ndarray`` the slot cannot rebuild, which only pickling
    carries).

    Shared (the default): :func:`~headrace._pack.pack`'s bases, so ``x`` and
    ``y`` cross as their one ``(B, L + 1)`` stretch. ``contiguous``: each
    field is copied apart, C-contiguous. A field of samples of several shapes:
    each sample apart. A masked field's mask: after the fields, packed alike.
    """
    ragged = {k: a for k, a in arrays.items() if a.dtype.hasobject}
    if not all(_arrays_only(a) for a in ragged.values()):
        return None
    dense: Batch = {}
    masks: Batch = {}
    subs: dict[str, tuple[type[Any], tuple[bytes, DtypeAt] | None, bool]] = {}
    for k, a in arrays.items():
        if k in ragged:
            continue
        kind = type(a)
        if isinstance(a, np.ma.MaskedArray) and kind is np.ma.MaskedArray:
            if getattr(a, "_baseclass", None) not in PLAIN:
                return None  # a masked record array, say: pickled
            dense[k] = np.ma.getdata(a)
            mask = np.ma.getmask(a)
            if isinstance(mask, np.ndarray):  # not nomask (no mask at all)
                masks[k] = mask
            # None until set or read: NumPy's default for the dtype.
            fill: NDArray[Any] | None = getattr(a, "_fill_value", None)
            at = None if fill is None else (fill.tobytes(), _dtype_at(fill.dtype))
            subs[k] = (kind, at, bool(a.hardmask))
        elif kind in _VIEWED:
            dense[k] = a.view(np.ndarray)
            subs[k] = (kind, None, False)
        elif kind in PLAIN:
            dense[k] = a
        else:
            return None  # another subclass: pickled, with what makes it one
    srcs: list[NDArray[Any]] = []
    at_dense = _place(dense, contiguous, srcs)
    at_mask = _place(masks, contiguous, srcs)
    fields = tuple((name, *at_dense[name]) for name in dense)
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
    kept = tuple(
        (name, kind, (name, *at_mask[name]) if name in at_mask else None, fill, hard)
        for name, (kind, fill, hard) in subs.items()
    )
    return srcs, (tuple(regions), fields, tuple(samples), kept)


def _place(arrays: Batch, contiguous: bool, srcs: list[NDArray[Any]]) -> dict[str, Field]:
    """Where each of ``arrays`` lies among the regions, whose arrays join ``srcs``."""
    if contiguous:
        at = {
            name: (len(srcs) + i, 0, a.shape, _c_strides(a.shape))
            for i, (name, a) in enumerate(arrays.items())
        }
        srcs.extend(arrays.values())
        return at
    bases, packed = pack(arrays)
    first = len(srcs)
    srcs.extend(bases)
    return {name: (first + i, off, shape, st) for name, (i, off, shape, st) in packed.items()}


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
    1-D, each item a plain array of numbers (not strings or other Python objects, nor a
    masked array, whose mask a slot would drop)."""
    return (
        type(a) is np.ndarray
        and a.ndim == 1
        and all(type(e) in PLAIN and not e.dtype.hasobject for e in a)
    )


def _size(regions: tuple[Region, ...]) -> int:
    """Bytes a chunk of this layout takes in a slot."""
    return sum(_aligned(_nbytes(d, sh)) for _, d, sh in regions)
