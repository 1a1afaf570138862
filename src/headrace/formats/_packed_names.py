"""A listing's names packed: one buffer of UTF-8 bytes and where each name ends.

A list of 1,281,167 ImageNet keys held as ``str`` costs ~100 bytes a key in every
process, takes tenths of a second to pickle into each worker and as long to unpickle
there, and, in a forked worker, every key read writes its object's reference count,
so each worker copies the pages of the listing it reads (the DataLoader
"copy-on-read" growth). Packed, a key costs its bytes and 8 for its end; a worker copy
is two arrays (pickled whole, out of band under protocol 5), and reading a key makes
a new ``str`` rather than touching a shared one.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast, overload

import numpy as np
from numpy.typing import NDArray

__all__ = ["PackedNames", "PackedSizes", "PackedTags"]

# Every str round-trips: a local name that is not UTF-8 comes from os.fsdecode as lone
# surrogates ("surrogateescape"), which strict UTF-8 refuses to encode.
_ERRORS = "surrogatepass"
_CHUNK = 1 << 16  # names packed at a time


class PackedNames(Sequence[str]):
    """Names as one ``uint8`` buffer and ``ends`` (one a name; ``uint32`` below 4 GiB of
    names, 4 bytes a name, else ``int64``): name ``i`` is
    ``data[ends[i - 1]:ends[i]]`` decoded. Equal to any sequence of the same strings."""

    __slots__ = ("_data", "_ends", "_view")

    def __init__(self, data: NDArray[np.uint8], ends: NDArray[np.integer[Any]]) -> None:
        self._data = data
        self._ends = ends
        self._view = memoryview(data)  # type: ignore[arg-type]

    @classmethod
    def of(cls, names: Iterable[str]) -> PackedNames:
        """``names`` packed (a :class:`PackedNames` as it is: its arrays are read-only)."""
        if isinstance(names, PackedNames):
            return names
        given = names if isinstance(names, list) else list(names)
        # A chunk at a time: encoded whole, the names' copies on the way (a str of them
        # all, then its bytes; or a bytes object a name) cost more than the result.
        raw, lengths = bytearray(), np.empty(len(given), dtype=np.int64)
        for at in range(0, len(given), _CHUNK):
            part = given[at : at + _CHUNK]
            joined = "".join(part)
            if joined.isascii():  # a byte a character
                raw += joined.encode("ascii")
                lengths[at : at + len(part)] = [len(n) for n in part]
            else:
                encoded = [n.encode("utf-8", _ERRORS) for n in part]
                raw += b"".join(encoded)
                lengths[at : at + len(part)] = [len(e) for e in encoded]
        ends: NDArray[np.integer[Any]] = np.cumsum(lengths)
        if len(ends) and ends[-1] < 1 << 32:
            ends = ends.astype(np.uint32)
        data = np.frombuffer(raw, dtype=np.uint8)
        for a in (data, ends):
            a.setflags(write=False)  # shared by slices and copies: never written
        return cls(data, ends)

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes + self._ends.nbytes)

    def __len__(self) -> int:
        return len(self._ends)

    def _span(self, i: int) -> tuple[int, int]:
        n = len(self._ends)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"name index {i} out of range ({n} names)")
        return (int(self._ends[i - 1]) if i else 0), int(self._ends[i])

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> PackedNames: ...
    def __getitem__(self, i: int | slice) -> str | PackedNames:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self._ends))
            if step != 1:
                return PackedNames.of([self[j] for j in range(start, stop, step)])
            stop = max(start, stop)
            first = int(self._ends[start - 1]) if start else 0
            last = int(self._ends[stop - 1]) if stop > start else first
            return PackedNames(self._data[first:last], self._ends[start:stop] - first)
        try:
            at = operator.index(i)
        except TypeError:
            raise TypeError(
                f"name indices must be integers or slices, not {type(i).__name__}"
            ) from None
        a, b = self._span(at)
        return str(self._view[a:b], "utf-8", _ERRORS)

    def __iter__(self) -> Iterator[str]:
        view, a = self._view, 0
        for b in self._ends.tolist():
            yield str(view[a:b], "utf-8", _ERRORS)
            a = b

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedNames):
            return np.array_equal(self._ends, other._ends) and np.array_equal(
                self._data, other._data
            )
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __repr__(self) -> str:
        shown = list(self) if len(self) <= 4 else [self[0], self[1], "...", self[-1]]
        return f"PackedNames({len(self):,} names: {shown!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # The two arrays, not a str a name (a PickleBuffer each under protocol 5).
        return (PackedNames, (self._data, self._ends))


class PackedTags(Sequence["str | None"]):
    """Version tags (ETags, local ``device:inode:mtime``) as :class:`PackedNames`, and
    which are ``None`` (a store that gave none)."""

    __slots__ = ("_missing", "_names")

    def __init__(self, names: PackedNames, missing: NDArray[np.bool_] | None) -> None:
        self._names = names
        self._missing = missing  # None: none is missing

    @classmethod
    def of(cls, tags: Iterable[str | None]) -> PackedTags:
        if isinstance(tags, PackedTags):
            return tags
        given = tags if isinstance(tags, list) else list(tags)
        missing = np.fromiter((t is None for t in given), dtype=np.bool_, count=len(given))
        if not missing.any():
            return cls(PackedNames.of(cast(list[str], given)), None)
        return cls(PackedNames.of(["" if t is None else t for t in given]), missing)

    @property
    def nbytes(self) -> int:
        return self._names.nbytes + (0 if self._missing is None else self._missing.nbytes)

    def __len__(self) -> int:
        return len(self._names)

    @overload
    def __getitem__(self, i: int) -> str | None: ...
    @overload
    def __getitem__(self, i: slice) -> PackedTags: ...
    def __getitem__(self, i: int | slice) -> str | PackedTags | None:
        if isinstance(i, slice):
            missing = None if self._missing is None else self._missing[i]
            return PackedTags(self._names[i], missing)
        name = self._names[i]  # a bad index raises as a list's does
        if self._missing is not None and self._missing[i]:
            return None
        return name

    def __iter__(self) -> Iterator[str | None]:
        if self._missing is None:
            return iter(self._names)
        return (None if m else t for t, m in zip(self._names, self._missing.tolist(), strict=True))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedTags({len(self):,} tags)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (PackedTags, (self._names, self._missing))


class PackedSizes(Sequence[int]):
    """Sizes as one read-only ``int64`` array (``array``), read as Python ``int``: one
    object, not one ``int`` a file, that passes wherever a list of them did (a size
    handed to a config that takes ``int``); ``np.asarray`` of it is the array."""

    __slots__ = ("array",)

    def __init__(self, array: NDArray[np.int64]) -> None:
        self.array = array

    @classmethod
    def of(cls, sizes: Iterable[int]) -> PackedSizes:
        if isinstance(sizes, PackedSizes):
            return sizes
        given = sizes if isinstance(sizes, np.ndarray) else list(sizes)
        array = np.array(given, dtype=np.int64)
        array.setflags(write=False)
        return cls(array)

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)

    def __len__(self) -> int:
        return len(self.array)

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> PackedSizes: ...
    def __getitem__(self, i: int | slice) -> int | PackedSizes:
        if isinstance(i, slice):
            return PackedSizes(self.array[i])
        return int(self.array[i])

    def __iter__(self) -> Iterator[int]:
        return iter(self.array.tolist())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> NDArray[Any]:
        # ``copy=True`` (np.array's default) promises an array of the caller's own, not
        # this read-only one; otherwise (np.asarray) no copy unless another dtype needs it.
        out = self.array if dtype is None else self.array.astype(dtype, copy=False)
        return out.copy() if copy and out is self.array else out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and self.array.tolist() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedSizes({len(self):,} sizes)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (PackedSizes, (self.array,))
