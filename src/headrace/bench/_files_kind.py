"""File-per-sample workloads (DLIO-like): NPZ, NPY, JPEG, HDF5, raw records.

The dataset is ``files`` files of ``samples_per_file`` samples each; file
``i``'s record size is drawn from a normal distribution (``record_bytes``,
``record_bytes_stdev``) keyed by ``(seed, i)``, clipped to at least 1/8 of the
mean. Samples are shuffled per epoch by a permutation keyed by
``(seed, epoch)``; step ``t`` takes positions ``[t*B, (t+1)*B)``.

Variants (all but ``raw`` deliver the same decoded arrays):

``serial``    one thread: open, read the whole file, decode, take the sample.
``threads``   the same on a pool of ``threads`` threads with ``in_flight``
              samples outstanding, delivered in plan order.
``raw``       bare concurrent reads of the same bytes, no decoding: the
              storage ceiling (not digested).

Formats other than ``raw`` are read whole, as DLIO's readers do, so a file of
several samples is read once per sample it gives (amplification shows it).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.bench._kind import Batch, GenStream, Kind, Stream, VariantSpec, variant
from headrace.errors import ConfigError
from headrace.formats import decode, file_format, synthetic_arrays, write_sample_file
from headrace.io import LocalFile
from headrace.plan import host_slice

__all__ = ["FilesKind"]

_EXT = {"npz": ".npz", "npy": ".npy", "jpeg": ".jpg", "png": ".png", "hdf5": ".h5", "raw": ".bin"}


class FilesKind(Kind):
    """``files`` files of ``samples_per_file`` samples in one folder."""

    def __init__(self, workload: Any, root: str) -> None:
        super().__init__(workload, root)
        ds, rd = workload.dataset, workload.reader
        self.format = file_format(str(ds.get("format", "npz"))).name
        self.num_files = int(ds.get("files", 16))
        self.per_file = int(ds.get("samples_per_file", 1))
        self.mean = int(ds.get("record_bytes", 1 << 20))
        self.stdev = int(ds.get("record_bytes_stdev", 0))
        self.image_hw = tuple(ds.get("image_hw", (512, 512)))
        if self.num_files < 1 or self.per_file < 1 or self.mean < 1:
            raise ConfigError(
                f"workload {workload.name!r}: files, samples_per_file and record_bytes must "
                f"be >= 1 (got {self.num_files}, {self.per_file}, {self.mean})"
            )
        if self.format in ("jpeg", "png") and self.per_file != 1:
            raise ConfigError(f"workload {workload.name!r}: {self.format} holds one image per file")
        self.threads = int(rd.get("threads", 4))
        self.in_flight = int(rd.get("in_flight", 2 * self.threads))
        t = workload.train
        self.lo, self.hi = host_slice(t.batch_size, t.rank, t.world_size)
        self.total = self.num_files * self.per_file

    # -- dataset --------------------------------------------------------------
    @property
    def folder(self) -> str:
        seed = self.workload.train.seed
        return os.path.join(
            self.root,
            f"{self.workload.name}-{self.format}-{self.num_files}x{self.per_file}-"
            f"{self.mean}b-{self.stdev}sd-s{seed}",
        )

    def path(self, i: int) -> str:
        return os.path.join(self.folder, f"{i:07d}{_EXT[self.format]}")

    def record_size(self, i: int) -> int:
        """Bytes of each sample of file ``i`` (before encoding)."""
        rng = np.random.default_rng([self.workload.train.seed, i])
        size = self.mean + (rng.standard_normal() * self.stdev if self.stdev else 0.0)
        return int(max(self.mean // 8, 1, round(size)))

    def sample_nbytes(self, i: int) -> int:
        if self.format in ("jpeg", "png"):
            return int(self.image_hw[0] * self.image_hw[1] * 3)
        return self.record_size(i)

    def _arrays(self, i: int) -> Any:
        seed = self.workload.train.seed * 1_000_003 + i
        if self.format in ("jpeg", "png"):
            return synthetic_arrays(self.format, seed=seed, shape=(*self.image_hw, 3))
        n = self.record_size(i)
        if self.format == "raw":
            rng = np.random.default_rng(seed)
            return rng.integers(0, 256, self.per_file * n, dtype=np.uint8)
        return synthetic_arrays(self.format, seed=seed, shape=(n,), samples_per_file=self.per_file)

    def generate(self, progress: Callable[[int, int], None] | None = None) -> None:
        os.makedirs(self.folder, exist_ok=True)
        for i in range(self.num_files):
            p = self.path(i)
            if not os.path.exists(p):  # written under a temporary name, then renamed
                tmp = p + ".part"
                write_sample_file(self.format, tmp, self._arrays(i))
                os.replace(tmp, p)
            if progress:
                progress(i + 1, self.num_files)

    def files(self) -> list[str]:
        return [self.path(i) for i in range(self.num_files)]

    def record_bytes(self) -> float:
        return float(np.mean([self.sample_nbytes(i) for i in range(self.num_files)]))

    # -- plan -----------------------------------------------------------------
    @lru_cache(maxsize=4)  # noqa: B019 - the kind lives as long as its run
    def _order(self, seed: int, epoch: int) -> NDArray[np.int64]:
        return np.random.default_rng([seed, epoch, 0x46494C45]).permutation(self.total)

    def step_samples(self, seed: int, step: int) -> NDArray[np.int64]:
        """Global sample numbers of this host's part of ``step``."""
        b = self.workload.train.batch_size
        pos = step * b + np.arange(self.lo, self.hi, dtype=np.int64)
        out = np.empty(len(pos), dtype=np.int64)
        for e in np.unique(pos // self.total).tolist():
            m = pos // self.total == e
            out[m] = self._order(seed, e)[pos[m] % self.total]
        return out

    def payload_bytes(self, start: int, stop: int) -> int:
        seed = self.workload.train.seed
        return sum(
            self.sample_nbytes(int(s) // self.per_file)
            for t in range(start, stop)
            for s in self.step_samples(seed, t)
        )

    def unique_payload_bytes(self, steps: int) -> int:
        # The stored bytes each delivery needs: its share of its file (these
        # readers cache nothing, so a sample delivered twice is needed twice).
        # Decoded JPEGs outgrow their files: payload is not the yardstick here.
        seed = self.workload.train.seed
        sizes = [os.path.getsize(self.path(i)) for i in range(self.num_files)]
        return sum(
            sizes[int(s) // self.per_file] // self.per_file
            for t in range(steps)
            for s in self.step_samples(seed, t)
        )

    # -- reading --------------------------------------------------------------
    def read(self, sample: int, *, decoded: bool = True) -> tuple[NDArray[Any], int]:
        """(sample array, bytes read): the whole file, or the record for ``raw``."""
        i, j = divmod(sample, self.per_file)
        path = self.path(i)
        with LocalFile(path) as f:
            if self.format == "raw":
                n = self.record_size(i)
                return f.pread(j * n, n), n
            data = f.pread(0, f.size)
        if not decoded:
            return data, data.size
        out = decode(
            self.format, data, name=path, **({"dataset": "x"} if self.format == "hdf5" else {})
        )
        arr = out["x"] if isinstance(out, dict) else out
        if self.per_file > 1:
            arr = arr[j]
        return np.asarray(arr), data.size


def _stream(
    k: FilesKind, spec: VariantSpec, steps: int, threads: int, *, decoded: bool = True
) -> Stream:
    seed = k.seed_of(spec)
    read = [0]
    pool = ThreadPoolExecutor(threads, thread_name_prefix="bench-files") if threads > 1 else None
    depth = max(1, spec.int("in_flight", k.in_flight))

    def samples() -> Iterator[int]:
        for t in range(steps):
            yield from k.step_samples(seed, t).tolist()

    def batches() -> Iterator[Batch]:
        b = k.hi - k.lo
        pending: deque[Future[tuple[NDArray[Any], int]]] = deque()
        it = samples()
        batch: Batch = {}
        for s in it:
            if pool is None:
                arr, n = k.read(s, decoded=decoded)
            else:
                pending.append(pool.submit(k.read, s, decoded=decoded))
                for s2 in it:  # keep ``depth`` samples in flight
                    pending.append(pool.submit(k.read, s2, decoded=decoded))
                    if len(pending) >= depth:
                        break
                arr, n = pending.popleft().result()
            read[0] += n
            batch[f"s{len(batch):04d}"] = arr
            if len(batch) == b:
                yield batch
                batch = {}
            while pending:
                arr, n = pending.popleft().result()
                read[0] += n
                batch[f"s{len(batch):04d}"] = arr
                if len(batch) == b:
                    yield batch
                    batch = {}
                if len(pending) < depth:
                    nxt = next(it, None)
                    if nxt is not None:
                        pending.append(pool.submit(k.read, nxt, decoded=decoded))  # type: ignore[union-attr]

    def close() -> None:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    return GenStream(batches(), lambda: read[0], close)


@variant(FilesKind, "serial")
def _serial(k: FilesKind, spec: VariantSpec, steps: int) -> Stream:
    return _stream(k, spec, steps, 1)


@variant(FilesKind, "threads")
def _threads(k: FilesKind, spec: VariantSpec, steps: int) -> Stream:
    return _stream(k, spec, steps, spec.int("threads", k.threads))


@variant(FilesKind, "raw", digest=False)
def _raw(k: FilesKind, spec: VariantSpec, steps: int) -> Stream:
    return _stream(k, spec, steps, spec.int("threads", k.threads), decoded=False)
