"""Which file and which item of it each global sample number reads: a pure plan.

Sample ``n`` falls in epoch ``n // N`` at position ``n % N`` (``N`` = the
samples of all files). Each epoch has its own bijective permutation keyed by
``(seed, epoch)``, so any sample is found without replaying earlier epochs,
and a persistent worker told the epoch can never keep an old order.

Files hold ``samples_per_file`` samples each, or ``counts[f]`` (any number,
0 included: such a file holds no sample and is never read). With counts,
position ``p`` of dataset order is item ``p - start[f]`` of the file ``f``
whose ``[start[f], start[f + 1])`` holds it (cumulative counts, found by
``searchsorted``: O(log files)). Under ``shuffle="files"`` the starts are those
of the epoch's file order: its cumulative counts are computed once per
``(seed, epoch)`` (O(files), kept for the last few epochs) and each sample is
then a ``searchsorted``. Uniform counts give exactly the fixed count's plan
(the same arithmetic: ``start[f] = f x count``).

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

import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from headrace.errors import ConfigError
from headrace.plan import cached_permutation

__all__ = ["FilePlan", "Shuffle", "file_shuffle"]

Shuffle = Literal["files", "samples", "none"]
_SHUFFLES: tuple[Shuffle, ...] = ("files", "samples", "none")


def file_shuffle(shuffle: object) -> Shuffle:
    """The file shuffle ``shuffle`` names: one of ``_SHUFFLES``, or ``True`` (the default,
    ``"files"``) and ``False`` (``"none"``), as rows, tables and tokens take them."""
    if shuffle is True or shuffle is False:
        return "files" if shuffle else "none"
    for name in _SHUFFLES:
        if isinstance(shuffle, str) and shuffle == name:
            return name
    raise ConfigError(
        f"shuffle must be one of {_SHUFFLES}, True (files) or False (none) (got {shuffle!r})."
    )


# Stream ids in the permutation keys, so the file order, the item orders and the
# sample order of an epoch never share a key.
_FILES, _ITEMS, _SAMPLES = 0, 1, 2


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, weakref_slot=True)
class FilePlan:
    """Maps global sample numbers to ``(file, item)`` for ``num_files`` files.

    ``counts``: the samples of each file (``num_files`` of them, each >= 0), in
    place of ``samples_per_file`` for every file.
    """

    num_files: int
    samples_per_file: int = 1
    shuffle: Shuffle | bool = "files"  # True: "files", False: "none"
    counts: Sequence[int] | NDArray[np.integer] | None = None
    # Cumulative counts: file f holds dataset positions [_starts[f], _starts[f + 1]).
    _starts: NDArray[np.int64] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.num_files < 1:
            raise ConfigError(f"a file dataset needs at least one file (got {self.num_files}).")
        if self.samples_per_file < 1:
            raise ConfigError(f"samples_per_file must be >= 1 (got {self.samples_per_file}).")
        object.__setattr__(self, "shuffle", file_shuffle(self.shuffle))
        if self.counts is None:
            return
        counts = np.array(self.counts, dtype=np.int64).reshape(-1)
        if counts.size != self.num_files:
            raise ConfigError(
                f"counts has {counts.size} entries for {self.num_files} files; expected one "
                "per file."
            )
        if counts.size and counts.min() < 0:
            f = int(np.argmax(counts < 0))
            raise ConfigError(f"counts must be >= 0 (file {f} has {int(counts[f])}).")
        starts = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        if starts[-1] < 1:
            raise ConfigError(f"the {self.num_files} files hold no sample (every count is 0).")
        counts.setflags(write=False)
        starts.setflags(write=False)
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "_starts", starts)

    @property
    def samples_per_epoch(self) -> int:
        if self._starts is not None:
            return int(self._starts[-1])
        return self.num_files * self.samples_per_file

    def count(self, file: int) -> int:
        """The samples of ``file``."""
        if self._starts is None:
            return self.samples_per_file
        return int(self._starts[file + 1] - self._starts[file])

    def start(self, file: int) -> int:
        """Where ``file``'s items begin in dataset order (a batch's ``index``)."""
        if self._starts is None:
            return file * self.samples_per_file
        return int(self._starts[file])

    def file_order(self, seed: int, epoch: int) -> NDArray[np.int64]:
        """Every file once, in the order epoch ``epoch`` visits them."""
        slots = np.arange(self.num_files, dtype=np.int64)
        if self.shuffle == "none":
            return slots
        return cached_permutation(self.num_files, seed, epoch, _FILES)(slots)

    def items(
        self, seed: int, epoch: int, file: int, at: NDArray[np.int64] | None = None
    ) -> NDArray[np.int64]:
        """The order in which epoch ``epoch`` visits the items of ``file`` (``at``: only
        those places of it, each evaluated on its own: a batch's few items of a file of
        313,532 cost what they are, where the whole order cost ~60 ms a chunk)."""
        n = self.count(file)
        pos = np.arange(n, dtype=np.int64) if at is None else at
        if self.shuffle == "none" or n <= 1:
            return pos
        return cached_permutation(n, seed, epoch, _ITEMS, file)(pos)

    def file_item(self, index: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(file, item)`` of each position of dataset order (a batch's ``index``)."""
        index = np.asarray(index, dtype=np.int64)
        n = self.samples_per_epoch
        if index.size and (index.min() < 0 or index.max() >= n):
            bad = index[(index < 0) | (index >= n)].reshape(-1)[0]
            raise ConfigError(f"index {int(bad)} is out of range for {n} samples.")
        if self._starts is None:
            spf = self.samples_per_file
            return index // spf, index % spf
        return _split(self._starts, index)

    def index(self, files: NDArray[np.int64], items: NDArray[np.int64]) -> NDArray[np.int64]:
        """Position in dataset order of item ``items`` of file ``files`` (inverse of
        :meth:`file_item`)."""
        if self._starts is None:
            return files * self.samples_per_file + items
        return self._starts[files] + items

    def locate(
        self, seed: int, samples: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(file, item)`` of each global sample number."""
        samples = np.asarray(samples, dtype=np.int64)
        if samples.size and samples.min() < 0:
            raise ConfigError(f"sample numbers must be >= 0 (got {int(samples.min())}).")
        n = self.samples_per_epoch
        epochs = samples // n
        pos = samples % n
        files = np.empty_like(samples)
        items = np.empty_like(samples)
        for e in np.unique(epochs).tolist():
            sel = epochs == e
            files[sel], items[sel] = self._locate_epoch(seed, e, pos[sel])
        return files, items

    def _locate_epoch(
        self, seed: int, e: int, p: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        if self.shuffle == "samples":
            p = cached_permutation(self.samples_per_epoch, seed, e, _SAMPLES)(p)
        if self.shuffle != "files":
            return self.file_item(p)
        if self._starts is None:
            spf = self.samples_per_file
            f = cached_permutation(self.num_files, seed, e, _FILES)(p // spf)
            i = p % spf
        else:
            order, starts = _epoch_starts(self, seed, e)
            slot, i = _split(starts, p)
            f = order[slot]
        for fi in np.unique(f).tolist():
            if self.count(fi) > 1:
                m = f == fi
                i[m] = self.items(seed, e, fi, i[m])
        return f, i


def _split(
    starts: NDArray[np.int64], pos: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``(f, pos - starts[f])`` for the ``f`` with ``starts[f] <= pos < starts[f + 1]``.

    ``side="right"`` skips files of no sample: their start equals the next one's.
    """
    f = np.searchsorted(starts, pos, side="right").astype(np.int64) - 1
    return f, pos - starts[f]


# Each plan's last few epochs, dropped with the plan: a cache of the module kept the
# plans themselves alive (their counts and starts, and each epoch's order and starts:
# O(files) each, ~100 MB for 1,281,167 files) after their sources were gone, and
# two sources in one process evicted each other's epochs.
_EPOCHS: weakref.WeakKeyDictionary[
    FilePlan, OrderedDict[tuple[int, int], tuple[NDArray[np.int64], NDArray[np.int64]]]
] = weakref.WeakKeyDictionary()
_EPOCHS_LOCK = threading.Lock()
_EPOCHS_KEPT = 4


def _epoch_starts(
    plan: FilePlan, seed: int, epoch: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The epoch's file order and the cumulative counts along it (O(files), kept for the
    plan's last few ``(seed, epoch)``: a chunk of steps mostly stays in one epoch)."""
    assert plan.counts is not None
    with _EPOCHS_LOCK:
        kept = _EPOCHS.setdefault(plan, OrderedDict())
        got = kept.get((seed, epoch))
        if got is not None:
            kept.move_to_end((seed, epoch))
            return got
    order = plan.file_order(seed, epoch)
    starts = np.zeros(plan.num_files + 1, dtype=np.int64)
    np.cumsum(np.asarray(plan.counts)[order], out=starts[1:])
    order.setflags(write=False)
    starts.setflags(write=False)
    with _EPOCHS_LOCK:
        kept[(seed, epoch)] = (order, starts)
        while len(kept) > _EPOCHS_KEPT:
            kept.popitem(last=False)
    return order, starts
