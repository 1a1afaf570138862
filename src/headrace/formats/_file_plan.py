"""Which file and which item of it each global sample number reads: a pure plan.

Sample ``n`` falls in epoch ``n // N`` at position ``n % N`` (``N`` = files x
samples per file). Each epoch has its own bijective permutation keyed by
``(seed, epoch)``, so any sample is found in O(1) without replaying earlier
epochs, and a persistent worker told the epoch can never keep an old order.

Shuffles:

* ``"files"`` (default): the order of files is permuted, and so is the order
  of items within each file, but a file's items stay together. One fetched
  file serves several neighbouring samples, so a batch of ``B`` samples costs
  about ``B / samples_per_file`` GETs.
* ``"samples"``: one permutation over all samples: every batch draws from
  about ``B`` different files (a GET, or a cached file, per sample).
* ``"none"``: dataset order, for evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError
from headrace.plan import cached_permutation

__all__ = ["FilePlan", "Shuffle"]

Shuffle = Literal["files", "samples", "none"]
_SHUFFLES = ("files", "samples", "none")
# Stream ids in the permutation keys, so the file order, the item orders and the
# sample order of an epoch never share a key.
_FILES, _ITEMS, _SAMPLES = 0, 1, 2


@dataclass(frozen=True, slots=True, kw_only=True)
class FilePlan:
    """Maps global sample numbers to ``(file, item)`` for ``num_files`` files."""

    num_files: int
    samples_per_file: int = 1
    shuffle: Shuffle = "files"

    def __post_init__(self) -> None:
        if self.num_files < 1:
            raise ConfigError(f"a file dataset needs at least one file (got {self.num_files}).")
        if self.samples_per_file < 1:
            raise ConfigError(f"samples_per_file must be >= 1 (got {self.samples_per_file}).")
        if self.shuffle not in _SHUFFLES:
            raise ConfigError(f"shuffle must be one of {_SHUFFLES} (got {self.shuffle!r}).")

    @property
    def samples_per_epoch(self) -> int:
        return self.num_files * self.samples_per_file

    def file_order(self, seed: int, epoch: int) -> NDArray[np.int64]:
        """Every file once, in the order epoch ``epoch`` visits them."""
        slots = np.arange(self.num_files, dtype=np.int64)
        if self.shuffle == "none":
            return slots
        return cached_permutation(self.num_files, seed, epoch, _FILES)(slots)

    def items(self, seed: int, epoch: int, file: int) -> NDArray[np.int64]:
        """The order in which epoch ``epoch`` visits the items of ``file``."""
        pos = np.arange(self.samples_per_file, dtype=np.int64)
        if self.shuffle == "none" or self.samples_per_file == 1:
            return pos
        return cached_permutation(self.samples_per_file, seed, epoch, _ITEMS, file)(pos)

    def locate(
        self, seed: int, samples: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(file, item)`` of each global sample number."""
        samples = np.asarray(samples, dtype=np.int64)
        if samples.size and samples.min() < 0:
            raise ConfigError(f"sample numbers must be >= 0 (got {int(samples.min())}).")
        n, spf = self.samples_per_epoch, self.samples_per_file
        epochs = samples // n
        pos = samples % n
        files = np.empty_like(samples)
        items = np.empty_like(samples)
        for e in np.unique(epochs).tolist():
            sel = epochs == e
            p = pos[sel]
            if self.shuffle == "none":
                f, i = p // spf, p % spf
            elif self.shuffle == "samples":
                g = cached_permutation(n, seed, e, _SAMPLES)(p)
                f, i = g // spf, g % spf
            else:
                f = cached_permutation(self.num_files, seed, e, _FILES)(p // spf)
                i = p % spf
                if spf > 1:
                    for fi in np.unique(f).tolist():
                        m = f == fi
                        i[m] = self.items(seed, e, fi)[i[m]]
            files[sel], items[sel] = f, i
        return files, items
