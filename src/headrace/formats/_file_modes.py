"""The iterable-style comparison reader: per-worker file shards, bulk read-ahead.

This is the path the seed calls ``TorchIterableDatasetSimple``, kept on purpose
so benchmarks can put it side by side with headrace's default. Worker ``w`` of
``W`` takes ``files[w::W]`` of the epoch's file order, fetches its shard with
up to ``in_flight`` requests in flight and yields batches of its own samples,
dropping the last partial batch. Unlike the seed's version, the file order is
a function of ``(seed, epoch)`` passed to :meth:`IterableFiles.epoch`, so a
persistent worker can never keep epoch 1's order. The order differs from the
global plan by design (each worker walks its own shard); compare it with
headrace on an order-independent digest (sorted per-sample digests). Under
``on_corrupt="replace"`` a file that does not decode is skipped (not replaced),
and counted against ``max_corrupt``; a tar shard's broken sample (one lacking a field
asked, or whose member does not decode) is skipped alone, as headrace replaces it alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._closing import Closing
from headrace.errors import ConfigError, DataError, UnsupportedFormError
from headrace.formats._file_samples import Sample, stack_samples
from headrace.formats._file_source import FileSource
from headrace.formats._file_window import FetchWindow, WindowStats
from headrace.formats._tar import BrokenSample

__all__ = ["IterableFiles"]


class IterableFiles(Closing):
    """Iterate one worker's shard of a :class:`FileSource`'s files, epoch by epoch."""

    def __init__(
        self,
        source: FileSource,
        *,
        batch_size: int,
        worker: int = 0,
        num_workers: int = 1,
        in_flight: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1 (got {batch_size}).")
        if num_workers < 1 or not 0 <= worker < num_workers:
            raise ConfigError(
                f"worker must be in [0, num_workers) (got {worker=}, {num_workers=})."
            )
        self.source = source
        self.batch_size = batch_size
        self.worker = worker
        self.num_workers = num_workers
        self.window = FetchWindow(source._fetch_file, in_flight or source.in_flight)

    @property
    def stats(self) -> WindowStats:
        return self.window.stats

    def shard(self, seed: int, epoch: int) -> NDArray[np.int64]:
        """This worker's files for ``epoch``, in the order it reads them."""
        return self.source.plan.file_order(seed, epoch)[self.worker :: self.num_workers]

    def epoch(self, seed: int, epoch: int) -> Iterator[dict[str, NDArray[Any]]]:
        """This worker's batches of ``epoch`` (the last partial batch is dropped)."""
        plan = self.source.plan
        shard = self.shard(seed, epoch)
        shard = shard[self.source.counts[shard] > 0].tolist()  # a file of no sample: not read
        self.source.reopen()
        self.window.plan(shard)
        samples: list[Sample] = []
        index: list[int] = []
        of: list[int] = []  # each sample's file, for stats.amplification
        try:
            for f in shard:
                broken: list[BrokenSample] = []
                try:
                    try:
                        arrays = self.source.decoder.decode(f, self.window.take(f))
                        # An HDF5 file read by ranges is fetched as decoding reads it.
                        self.window.recount(f)
                    finally:
                        self.window.release(f)
                    items, picked = [], []
                    for i in plan.items(seed, epoch, f).tolist():
                        try:
                            picked.append(self.source.decoder.pick(arrays, f, i))
                        except BrokenSample as exc:
                            # One sample of a tar shard (on_corrupt="replace"): left out
                            # alone, its shard's others read, as headrace replaces it
                            # alone (the shard's every sample was left out).
                            broken.append(exc)
                            continue
                        items.append(i)
                except DataError as exc:
                    if self.source.config.on_corrupt == "raise" or isinstance(
                        exc, UnsupportedFormError
                    ):
                        raise  # (a form not read, a codec this process lacks: no damage)
                    # Skipped, not replaced (each worker reads its own shard); counted
                    # against max_corrupt (it raised under either on_corrupt before).
                    self.source._note_corrupt(f, exc, left_out=True)
                    continue
                # Noted here, not in the try above: past max_corrupt, the error was taken
                # for the shard's own, the shard left out, and the run went on.
                for err in broken:
                    self.source._note_corrupt(f, err, left_out=True)
                start = plan.start(f)
                for i, sample in zip(items, picked, strict=True):
                    samples.append(sample)
                    index.append(start + i)
                    of.append(f)
                    if len(samples) == self.batch_size:
                        self.source._count_read(np.asarray(of, dtype=np.int64), self.window.stats)
                        where = self.source.files.url or "the files"
                        yield self.source.labelled(
                            stack_samples(samples, np.asarray(index, np.int64), where=where)
                        )
                        samples, index, of = [], [], []
        finally:
            self.window.close()

    def close(self) -> None:
        self.window.close()
