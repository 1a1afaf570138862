"""Variable-length rows as one flat values array plus row offsets."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError

__all__ = ["Ragged"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Ragged:
    """Rows of different lengths: row ``i`` is ``values[offsets[i]:offsets[i + 1]]``.

    ``offsets`` has one more entry than there are rows and never decreases;
    ``offsets[0]`` need not be 0 (a slice of a larger buffer keeps its
    offsets). This is how tables hand token lists to :func:`headrace.collate.pad_batch`
    without building one Python object per row.
    """

    values: NDArray[np.generic]
    offsets: NDArray[np.int64]

    def __post_init__(self) -> None:
        if self.values.ndim != 1:
            raise ConfigError(f"Ragged values must be 1-D (got shape {self.values.shape})")
        if self.offsets.ndim != 1 or self.offsets.size < 1:
            raise ConfigError(
                f"Ragged offsets must be 1-D with at least one entry (got shape "
                f"{self.offsets.shape})"
            )
        if self.offsets.dtype != np.int64:
            raise ConfigError(f"Ragged offsets must be int64 (got {self.offsets.dtype})")
        first, last = int(self.offsets[0]), int(self.offsets[-1])
        if first < 0 or last > self.values.size:
            raise ConfigError(
                f"Ragged offsets span [{first}, {last}) but values has {self.values.size} items"
            )
        if self.offsets.size > 1 and bool((np.diff(self.offsets) < 0).any()):
            raise ConfigError("Ragged offsets must never decrease")

    def __len__(self) -> int:
        return int(self.offsets.size) - 1

    @property
    def lengths(self) -> NDArray[np.int64]:
        """Length of every row."""
        return np.diff(self.offsets)

    def row(self, i: int) -> NDArray[np.generic]:
        """Row ``i`` as a view of ``values``."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"row {i} out of range for {n} rows")
        i %= n
        return self.values[int(self.offsets[i]) : int(self.offsets[i + 1])]
