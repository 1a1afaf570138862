"""A Source of file samples (NPY, NPZ, JPEG, PNG, HDF5, raw) on local disk or object storage.

Plan like map-style, fetch like iterable-style: the order is a global,
resumable permutation per epoch (:class:`FilePlan`), and the source runs
ahead along it with up to ``in_flight`` whole-file fetches held
(:class:`FetchWindow`). The loader's ``prefetch(seed, samples)`` queues the
next chunk's files as soon as the current chunk is read, so fetches for step
``t + 1`` overlap the decoding of step ``t``. Decoding runs on a small thread
pool: the JPEG, PNG and zlib decoders release the GIL for the heavy part.

``mode="map-style"`` is the baseline the seed describes: one fetch at a time,
then its decode, sample after sample in plan order. It reads the same samples
in the same order, so its batches are byte-identical to the default mode's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from headrace._closing import Closing
from headrace.errors import ConfigError
from headrace.formats._file_list import FileList, LocalRead, list_files
from headrace.formats._file_plan import FilePlan, Shuffle
from headrace.formats._file_samples import Sample, decode_file, pick_item, stack_samples
from headrace.formats._file_window import FetchWindow, WindowStats
from headrace.formats._files import FileFormat, file_format
from headrace.formats._object_files import check_in_flight

__all__ = ["FileSource", "FileSourceConfig", "SourceMode"]

SourceMode = Literal["headrace", "map-style"]
DEFAULT_REMOTE_IN_FLIGHT = 64
DEFAULT_LOCAL_IN_FLIGHT = 16


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSourceConfig:
    """How a :class:`FileSource` reads.

    ``format``: ``npy``, ``npz``, ``jpeg``, ``png``, ``hdf5`` or ``raw``.
    ``samples_per_file``: samples per file, on a leading axis (NPY, NPZ, HDF5).
    ``decode=False`` hands over each file's bytes (I/O benchmarks).
    ``in_flight``: fetches held at once (default 64 on object stores, 16 on
    local disk). ``decode_threads``: 0 decodes on the reading thread.
    ``local_read``: ``pread`` (page cache) or ``odirect`` (bypass it).
    ``datasets``: the HDF5 datasets to read. ``speculate``: after a contiguous
    run of samples, read ahead into the next run before the loader asks.
    """

    format: str = "raw"
    samples_per_file: int = 1
    decode: bool = True
    shuffle: Shuffle = "files"
    mode: SourceMode = "headrace"
    in_flight: int | None = None
    decode_threads: int = 2
    local_read: LocalRead = "pread"
    datasets: tuple[str, ...] | None = None
    speculate: bool = True

    def __post_init__(self) -> None:
        fmt = file_format(self.format)
        if self.mode not in ("headrace", "map-style"):
            raise ConfigError(f"mode must be 'headrace' or 'map-style' (got {self.mode!r}).")
        if self.in_flight is not None:
            check_in_flight(self.in_flight)
        if self.decode_threads < 0:
            raise ConfigError(f"decode_threads must be >= 0 (got {self.decode_threads}).")
        if self.samples_per_file > 1 and fmt.name in ("jpeg", "png", "raw"):
            raise ConfigError(
                f"{fmt.name} files hold one sample each (got "
                f"samples_per_file={self.samples_per_file})."
            )
        if self.samples_per_file > 1 and not self.decode:
            raise ConfigError("decode=False hands over whole files: use samples_per_file=1.")
        if fmt.name == "hdf5" and self.decode and not self.datasets:
            raise ConfigError("hdf5 files need datasets=('name', ...) naming what to read.")


class FileSource(Closing):
    """Samples of a dataset of files, by global sample number (a :class:`Source`).

    ``files``: a local directory (every file with the format's extension,
    recursively), a list of local paths, or an object-store URL prefix
    (``s3://bucket/prefix``; ``store_options`` go to
    :class:`headrace.io.ObjectStore`). Options are :class:`FileSourceConfig`
    fields, or pass ``config``.
    """

    def __init__(
        self,
        files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        config: FileSourceConfig | None = None,
        store_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        if config is None:
            config = FileSourceConfig(**options)
        elif options:
            raise ConfigError(f"pass options or config, not both (got {sorted(options)}).")
        self._open(files, config, store_options, None)

    def _open(
        self,
        files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        config: FileSourceConfig,
        store_options: Mapping[str, Any] | None,
        listing: tuple[list[str], list[int]] | None,
    ) -> None:
        self._args = (files, config, dict(store_options or {}))
        self.config = config
        self.format: FileFormat = file_format(config.format)
        self.files: FileList = list_files(
            files,
            extensions=self.format.extensions,
            local_read=config.local_read,
            store_options=store_options,
            listing=listing,
        )
        self.plan = FilePlan(
            num_files=len(self.files),
            samples_per_file=config.samples_per_file,
            shuffle=config.shuffle,
        )
        default = DEFAULT_REMOTE_IN_FLIGHT if self.files.remote else DEFAULT_LOCAL_IN_FLIGHT
        self.in_flight = config.in_flight or default
        depth = 1 if config.mode == "map-style" else self.in_flight
        self.window = FetchWindow(self.files.fetch, depth)
        self._decoders: ThreadPoolExecutor | None = None
        self._kept: int | None = None
        self._prefetched: set[int] = set()

    # -- the Source protocol -------------------------------------------------------
    def fingerprint(self) -> dict[str, Any]:
        c = self.config
        return {
            "kind": "files",
            "url": self.files.url,
            "keys": self.files.keys,
            "sizes": self.files.sizes,
            "format": self.format.name,
            "samples_per_file": c.samples_per_file,
            "shuffle": c.shuffle,
            "decode": c.decode,
            "datasets": list(c.datasets or ()),
        }

    @property
    def samples_per_epoch(self) -> int:
        return self.plan.samples_per_epoch

    @property
    def stats(self) -> WindowStats:
        return self.window.stats

    def read(self, seed: int, samples: NDArray[np.int64]) -> dict[str, NDArray[Any]]:
        samples = np.asarray(samples, dtype=np.int64)
        files, items = self.plan.locate(seed, samples)
        index = files * self.plan.samples_per_file + items
        if self.config.mode == "map-style":
            return stack_samples(self._read_serial(files, items), index)
        order = list(dict.fromkeys(files.tolist()))
        need = set(order)
        # Read-ahead from a prefetch for *these* samples is kept; one for other samples
        # (a jump, a resume, random access) is dropped so it cannot hold slots.
        upcoming = self.window.queued if need <= self._prefetched else []
        self._prefetched = set()
        self.window.retain(need | set(upcoming))
        ahead = [f for f in upcoming if f not in need]
        if not ahead:
            ahead = self._guess_next(seed, samples, need)
        self.window.plan(order + ahead)
        decoded = self._fetch_and_decode(order)
        spf = self.plan.samples_per_file
        return stack_samples(
            [
                pick_item(decoded[f], i, spf, self.files.name(f))
                for f, i in zip(files.tolist(), items.tolist(), strict=True)
            ],
            index,
        )

    def _guess_next(self, seed: int, samples: NDArray[np.int64], need: set[int]) -> list[int]:
        """The files of the run of samples right after a contiguous run (a speculation).

        The loader names the next chunk only after this one is read; without a
        guess the window would drain at the end of every chunk. A wrong guess
        costs fetches, never results: :meth:`read` drops read-ahead it was not
        asked for.
        """
        n = len(samples)
        if n == 0 or int(samples[-1]) - int(samples[0]) + 1 != n or not self.config.speculate:
            return []
        files, _ = self.plan.locate(seed, samples + n)
        return [f for f in dict.fromkeys(files.tolist()) if f not in need]

    def prefetch(self, seed: int, samples: NDArray[np.int64]) -> None:
        """Queue the files these samples need; start as many fetches as the window allows."""
        if self.config.mode == "map-style":
            return  # the baseline fetches one file at a time, when asked
        files, _ = self.plan.locate(seed, np.asarray(samples, dtype=np.int64))
        order = dict.fromkeys(files.tolist())
        self._prefetched = set(order)
        self.window.plan(order)

    # -- reading -------------------------------------------------------------------
    def _decode(self, f: int, data: Any) -> Sample:
        c = self.config
        return decode_file(
            self.format, data, name=self.files.name(f), decode=c.decode, datasets=c.datasets
        )

    def _read_serial(self, files: NDArray[np.int64], items: NDArray[np.int64]) -> list[Sample]:
        spf = self.plan.samples_per_file
        out = []
        for f, i in zip(files.tolist(), items.tolist(), strict=True):
            try:
                data = self.window.take(f)
            finally:
                self.window.release(f)
            out.append(pick_item(self._decode(f, data), i, spf, self.files.name(f)))
        return out

    def _fetch_and_decode(self, order: list[int]) -> dict[int, Sample]:
        """Decode each file as its bytes arrive, releasing its window slot when done."""
        threads = self.config.decode_threads
        last = order[-1] if order else None
        # With several samples per file, the chunk's last file usually goes on into
        # the next chunk: keep its bytes until the next read says otherwise.
        keep = last if self.plan.samples_per_file > 1 else None
        if self._kept is not None and self._kept not in order:
            self.window.release(self._kept)
        self._kept = keep

        def done(f: int) -> None:
            if f != keep:
                self.window.release(f)

        if threads == 0 or len(order) == 1:
            out = {}
            for f in order:
                try:
                    out[f] = self._decode(f, self.window.take(f))
                finally:
                    done(f)
            return out
        if self._decoders is None:
            self._decoders = ThreadPoolExecutor(threads, thread_name_prefix="headrace-decode")
        pending: dict[int, Future[Sample]] = {}

        def job(f: int, data: Any) -> Sample:
            try:
                return self._decode(f, data)
            finally:
                done(f)

        try:
            for f in order:
                # Taking a file the window has not started would fetch past its
                # bound while decodes still hold every slot: wait for one to free.
                while self.window.full_without(f) and any(not p.done() for p in pending.values()):
                    next(p for p in pending.values() if not p.done()).result()
                data = self.window.take(f)
                pending[f] = self._decoders.submit(job, f, data)
                # Bound the bytes parked in the decode queue: a slot is only freed
                # once its file is decoded, so the window bound holds anyway; this
                # keeps one slow decode from idling the fetches behind it.
                while sum(not p.done() for p in pending.values()) > 2 * threads:
                    next(p for p in pending.values() if not p.done()).result()
            return {f: p.result() for f, p in pending.items()}
        except BaseException:
            for p in pending.values():
                p.cancel()
            for f in order:
                if f not in pending or pending[f].cancelled():
                    done(f)
            raise

    # -- lifecycle -------------------------------------------------------------------
    def close(self) -> None:
        self.window.close()
        if self._decoders is not None:
            self._decoders.shutdown(wait=True)
            self._decoders = None
        self._kept = None
        self.files.close()

    def __getstate__(self) -> dict[str, Any]:
        # Worker copies own their store, window and decode pool: carry only what
        # re-opens them, and the listing, so a copy never lists again.
        return {"args": self._args, "listing": (self.files.keys, self.files.sizes)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        files, config, store_options = state["args"]
        self._open(files, config, store_options, state["listing"])
