"""The interface every byte-range store offers (local files, object stores)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from headrace.io._ranges import Ranges

__all__ = ["RangeStore"]


@runtime_checkable
class RangeStore(Protocol):
    """Reads byte ranges of files or objects named by path or key.

    Requests may be reordered, merged and run in parallel; results always
    come back in caller order, byte-identical whatever the strategy.
    """

    def size(self, path: str) -> int:
        """The size in bytes of ``path``."""
        ...

    def read(self, path: str, ranges: Ranges) -> list[NDArray[np.uint8]]:
        """One new array per ``(offset, length)`` range, in caller order."""
        ...

    def read_into(self, path: str, ranges: Ranges, outs: Sequence[Any]) -> None:
        """Fill caller-owned writable buffers, one per range, in caller order."""
        ...

    def read_rows(
        self,
        path: str,
        rows: Sequence[int] | NDArray[np.integer[Any]],
        row_bytes: int,
        *,
        base: int = 0,
        stride: int | None = None,
        out: NDArray[np.uint8] | None = None,
    ) -> NDArray[np.uint8]:
        """Fixed-width rows ``base + rows[i] * stride`` as one ``(N, row_bytes)`` array."""
        ...

    def close(self) -> None:
        """Release every open file or connection."""
        ...
