"""The variants of the ``files`` kind: five ways to read the same files.

``map-style``     :class:`FileSource` ``mode="map-style"``: one request at a
                  time, fetch then decode, in plan order (PyTorch's map-style
                  dataset with one worker).
``iterable``      :class:`IterableFiles`: the worker's shard of each epoch's
                  file order with ``in_flight`` fetches (an iterable dataset).
                  Its order differs from the plan by design: compared on
                  sorted per-sample digests, over whole epochs.
``headrace``      :class:`FileSource` through the :class:`Loader`: the global
                  plan, a read-ahead window of ``in_flight`` fetches, decoding
                  on ``decode_threads`` threads.
``headrace-raw``  the same with ``decode=False``: each file's bytes.
``headrace-cached`` ``headrace`` with ``cache_dir`` (object storage only): each
                  object read from the run's local cache, filled before the
                  run (an epoch after the first; see :mod:`headrace.bench._storage`).
``ceiling``       bare concurrent GETs (or whole-file preads) of the same files,
                  ``in_flight`` at a time, handed over as they complete, no
                  decoding: what the storage gives. Completion order: compared
                  with ``headrace-raw`` on sorted per-sample digests.

Stage figures (``Stream.stats``): requests, the most in flight at once,
request latency percentiles (``ObjectStore.stats`` on S3; each whole-file
read timed here on local disk), seconds spent fetching and decoding (summed
over threads), bytes fetched.

``preprocess_time`` (DLIO's ``reader.preprocess_time``, with its ``_stdev``):
simulated work per delivered sample, one draw per dataset sample made once
(so every variant sleeps the same for the same sample), slept after each read
of the source (on the loader's read-ahead thread, as DLIO's reader threads
preprocess beside the compute), divided over the decoding threads
(``decode_threads``; one for map-style); counted in ``decode_s``. The raw
variants and the ceiling do not decode: none.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.bench._files_kind import FilesKind
from headrace.bench._kind import (
    Batch,
    GenStream,
    Stream,
    VariantSpec,
    latency_figures,
    store_figures,
    variant,
)
from headrace.errors import ConfigError
from headrace.formats import FileSource, IterableFiles
from headrace.io._daemon_pool import DaemonPool

__all__ = ["FilesKind", "StageProbe"]

#: How long closing the ``ceiling`` waits for its fetches in flight (a healthy one ends
#: in milliseconds; one stuck in a stalled mount is left on its daemon thread).
_CLOSE_WAIT_S = 2.0


class StageProbe:
    """Times a source's fetches and decodes, and counts fetches in flight.

    FileSource does not time its stages itself, so the bench wraps the two
    calls it makes per file (``files.fetch`` and ``_decode``); the wrappers add
    two clock reads and a lock per file, nothing per byte.
    """

    def __init__(self, preprocess: NDArray[np.float64] | None = None, threads: int = 1) -> None:
        self._lock = threading.Lock()
        self.preprocess = preprocess  # seconds per dataset sample, or None
        self.threads = max(1, threads)
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.bytes = 0
        self.read_s = 0.0
        self.decode_s = 0.0
        self.decodes = 0
        self.latencies: list[float] = []

    def fetch(self, fn: Callable[[int], Any]) -> Callable[[int], Any]:
        def timed(i: int) -> Any:
            with self._lock:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
            t0 = time.perf_counter()
            try:
                data = fn(i)
            finally:
                dt = time.perf_counter() - t0
                with self._lock:
                    self.in_flight -= 1
            with self._lock:
                self.requests += 1
                self.read_s += dt
                self.bytes += memoryview(data).nbytes
                self.latencies.append(dt)
            return data

        return timed

    def decode(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                dt = time.perf_counter() - t0
                with self._lock:
                    self.decode_s += dt
                    self.decodes += 1

        return timed

    def simulate(self, index: NDArray[np.int64]) -> None:
        """Sleep the simulated preprocessing of these samples, shared by the threads."""
        if self.preprocess is None or not len(index):
            return
        dt = float(self.preprocess[index].sum()) / self.threads
        time.sleep(dt)
        with self._lock:
            self.decode_s += dt

    def preprocessed(self, read: Callable[..., Batch]) -> Callable[..., Batch]:
        def timed(*args: Any, **kw: Any) -> Batch:
            batch = read(*args, **kw)
            self.simulate(batch["index"])
            return batch

        return timed

    def attach(self, src: FileSource) -> FileSource:
        """Wrap ``src``'s fetch (used by its window and by IterableFiles) and decode."""
        # FileList.fetch calls its ``_fetch`` field; the windows hold FileList.fetch.
        src.files._fetch = self.fetch(src.files._fetch)
        src.decoder.decode = self.decode(src.decoder.decode)  # type: ignore[method-assign]
        if self.preprocess is not None:
            src.read = self.preprocessed(src.read)  # type: ignore[method-assign]
        return src

    def stats(self, store: Any = None) -> dict[str, Any]:
        """The figures; an object store's own request counters win where there is one."""
        with self._lock:
            out: dict[str, Any] = {
                "requests": self.requests,
                "in_flight_observed": self.max_in_flight,
                "read_s": self.read_s,
                "decode_s": self.decode_s if self.decodes else None,
                "bytes_fetched": self.bytes,
                "request_latency_s": latency_figures(list(self.latencies)),
            }
        return out | store_figures(None if store is None else store.stats)


def _probe(k: FilesKind, *, decoding: bool = True, threads: int = 1) -> StageProbe:
    mean, stdev = k.preprocess
    if not decoding or (mean <= 0 and stdev <= 0):
        return StageProbe()
    n = k.num_files * k.per_file
    draws = np.random.default_rng(0x707265).normal(mean, stdev, n).clip(0.0, None)
    return StageProbe(draws, threads)


def _loader_stream(k: FilesKind, spec: VariantSpec, steps: int, **options: Any) -> Stream:
    threads = 1 if options.get("mode") == "map-style" else k.decode_threads
    probe = _probe(k, decoding=options.get("decode", True), threads=threads)
    in_flight = spec.int("in_flight", k.in_flight or 0) or None
    src = probe.attach(k.source(in_flight=in_flight, **options))
    loader = k.loader(
        src,
        spec,
        steps,
        prefetch=spec.int("prefetch", k.prefetch),
        chunk_steps=spec.int("chunk_steps", k.chunk_steps),
    )

    def close() -> None:
        loader.close()
        src.close()

    def stats() -> dict[str, Any]:
        out = probe.stats(src.files.store)
        if src.config.mode != "map-style":
            out["in_flight_observed"] = max(
                out["in_flight_observed"], src.stats.max_in_flight_observed
            )
        out["peak_held_bytes"] = src.stats.peak_held_bytes
        out["in_flight"] = 1 if src.config.mode == "map-style" else src.in_flight
        if src.cache_stats is not None:
            out["cache"] = src.cache_stats.to_dict()
        return out

    return GenStream(iter(loader), lambda: src.stats.bytes, close, stats)


@variant(FilesKind, "map-style")
def _map_style(k: FilesKind, spec: VariantSpec, steps: int) -> Stream:
    return _loader_stream(k, spec, steps, mode="map-style")


@variant(FilesKind, "headrace")
def _headrace(k: FilesKind, spec: VariantSpec, steps: int) -> Stream:
    return _loader_stream(
        k, spec, steps, decode_threads=spec.int("decode_threads", k.decode_threads)
    )


@variant(FilesKind, "headrace-cached")
def _headrace_cached(k: FilesKind, spec: VariantSpec, steps: int) -> Stream:
    return _loader_stream(
        k,
        spec,
        steps,
        decode_threads=spec.int("decode_threads", k.decode_threads),
        cache_dir=k.store.run_cache_dir(spec.text),
    )


@variant(FilesKind, "headrace-raw", group="raw")
def _headrace_raw(k: FilesKind, spec: VariantSpec, steps: int) -> Stream:
    _one_per_file(k, spec)
    return _loader_stream(k, spec, steps, decode=False)


def _one_per_file(k: FilesKind, spec: VariantSpec) -> None:
    if k.per_file != 1:
        raise ConfigError(
            f"variant {spec.text!r} hands over whole files as samples: it needs "
            f"samples_per_file = 1 (workload {k.workload.name!r} has {k.per_file})"
        )


@variant(FilesKind, "iterable", order="any")
def _iterable(k: FilesKind, spec: VariantSpec, steps: int) -> Stream:
    probe = _probe(k, threads=k.decode_threads)
    src = probe.attach(k.source())
    t = k.workload.train
    it = IterableFiles(
        src,
        batch_size=k.hi - k.lo,
        worker=t.rank,
        num_workers=t.world_size,
        in_flight=spec.int("in_flight", src.in_flight),
    )
    seed = k.seed_of(spec)

    def batches() -> Iterator[Batch]:
        n, epoch = 0, 0
        while n < steps:
            got = 0
            for b in it.epoch(seed, epoch):
                probe.simulate(b["index"])  # IterableFiles reads in this thread
                yield b
                n, got = n + 1, got + 1
                if n == steps:
                    return
            if not got:
                # The host's shard, not the dataset: "an epoch of 8 files" was said where
                # host 1 of 2 reads 4 of them.
                raise ConfigError(
                    f"variant {spec.text!r}: host {t.rank} of {t.world_size} reads "
                    f"{len(it.shard(seed, epoch))} of the {len(src.files)} files, "
                    f"{k.shard_files() * k.per_file} samples an epoch: no whole batch of "
                    f"{k.hi - k.lo} (it drops each epoch's last partial batch); use more "
                    "files, a smaller batch, or leave the variant out (--variants)"
                )
            epoch += 1

    def close() -> None:
        it.close()
        src.close()

    def stats() -> dict[str, Any]:
        out = probe.stats(src.files.store)
        out["in_flight"] = it.window.depth
        out["peak_held_bytes"] = it.stats.peak_held_bytes
        return out

    return GenStream(batches(), lambda: it.stats.bytes, close, stats)


@variant(FilesKind, "ceiling", order="any", group="raw")
def _ceiling(k: FilesKind, spec: VariantSpec, steps: int) -> Stream:
    _one_per_file(k, spec)
    probe = StageProbe()
    src = k.source(decode=False)
    fetch = probe.fetch(src.files.fetch)
    depth = spec.int("in_flight", src.in_flight)
    order = k.step_files(k.seed_of(spec), 0, steps).tolist()
    b = k.hi - k.lo
    # Daemon threads: a fetch stuck in a stalled mount holds neither a Ctrl-C nor the exit
    # (a ThreadPoolExecutor's were joined by both).
    pool = DaemonPool(depth, thread_name_prefix="bench-ceiling")
    running: set[Future[Any]] = set()
    abandoned = False

    def batches() -> Iterator[Batch]:
        nonlocal running, abandoned
        todo = deque(order)
        done: list[np.ndarray[Any, Any]] = []
        try:
            while todo or running:
                while todo and len(running) < depth:
                    running.add(pool.submit(fetch, todo.popleft()))
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                done += [np.frombuffer(f.result(), dtype=np.uint8) for f in finished]
                while len(done) >= b:
                    out = np.empty(b, dtype=object)
                    for j in range(b):
                        out[j] = done[j]
                    del done[:b]
                    yield {"bytes": out}
        except (GeneratorExit, Exception):
            raise  # closed early, or a fetch failed: close() waits for those in flight
        except BaseException:
            abandoned = True  # a Ctrl-C: close() waits for none (one may be stuck)
            raise

    def close() -> None:
        # Fetches in flight end before their source closes; waited for a while only, as
        # a Ctrl-C in the consumer leaves one stuck in a stalled mount here too.
        _, stuck = wait(running, timeout=0 if abandoned else _CLOSE_WAIT_S)
        pool.shutdown(wait=not stuck, cancel_futures=True)
        src.close()

    def stats() -> dict[str, Any]:
        out = probe.stats(src.files.store)
        out["in_flight"] = depth
        return out

    return GenStream(batches(), lambda: probe.bytes, close, stats)
