"""File workloads for ``headrace bench``: RetinaNet-like JPEGs and UNet3D-like NPZ.

Datasets are generated deterministically from a seed, on local disk and (for
``storage="s3"``) uploaded to a moto S3 server started for the run, behind a
:class:`LatencyProxy` when ``latency_ms`` is given. Each variant runs in a
fresh spawned process, so its peak RSS is its own:

* ``map-style``: one request at a time, fetch then decode, in plan order;
* ``iterable``: one worker's shard (here: all files) with bulk read-ahead;
* ``headrace``: the global plan with ``in_flight`` fetches held, decoding;
* ``headrace-raw``: the same without decoding (the file bytes);
* ``ceiling``: bare concurrent GETs (or preads) of every file, no decoding.

Digests: every sample is hashed (names, dtypes, shapes, bytes;
:func:`headrace.formats.sample_digests`); ``digest`` hashes those in stream
order, ``canonical_digest`` in sorted order. map-style and headrace must
agree on ``digest``; iterable reads another order by design, so it is
compared on ``canonical_digest``. The sample number (``index``) is left out of
the hash, so content alone decides. Raw variants (``headrace-raw``,
``ceiling``) hash file bytes and agree with each other on it.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import resource
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from headrace.errors import ConfigError
from headrace.formats import FileSource, IterableFiles, encode, sample_digests, synthetic_arrays

__all__ = [
    "FILE_VARIANTS",
    "FILE_WORKLOADS",
    "FilesWorkload",
    "generate_files",
    "run_files_bench",
    "s3_endpoint",
    "upload_files",
]

FILE_VARIANTS = ("map-style", "iterable", "headrace", "headrace-raw", "ceiling")
MiB = 1 << 20


@dataclass(frozen=True, kw_only=True, slots=True)
class FilesWorkload:
    """A generated file dataset and how the bench reads it."""

    name: str
    format: str
    files: int
    shape: tuple[int, ...]
    batch_size: int
    in_flight: int
    prefetch: int = 8
    chunk_steps: int = 8

    def __post_init__(self) -> None:
        if self.files < self.batch_size:
            raise ConfigError(f"{self.name}: {self.files} files is less than one batch.")


FILE_WORKLOADS = {
    # ~300 KB JPEGs, as RetinaNet's OpenImages-like set; 64 requests in flight.
    "jpeg": FilesWorkload(
        name="jpeg", format="jpeg", files=1000, shape=(512, 512, 3), batch_size=8, in_flight=64
    ),
    # 24 MiB NPZ volumes, as UNet3D's (140 MiB there) scaled to 2 cores; the window
    # is 4 files deep, and the loader queue holds 2 batches (one step per chunk).
    "npz": FilesWorkload(
        name="npz",
        format="npz",
        files=16,
        shape=(192, 256, 512),
        batch_size=2,
        in_flight=4,
        prefetch=2,
        chunk_steps=1,
    ),
}


def _photo(seed: int, shape: tuple[int, ...]) -> np.ndarray[Any, np.dtype[np.uint8]]:
    # Stronger noise than synthetic_arrays' images, so a 512x512 JPEG weighs ~300 KB
    # like a photo rather than ~100 KB.
    h, w, c = shape
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = ((yy * 255) // (h - 1) + (xx * 255) // (w - 1)) // 2
    img = base[:, :, None] + rng.integers(-40, 41, size=(h, w, c))
    out: np.ndarray[Any, np.dtype[np.uint8]] = np.clip(img, 0, 255).astype(np.uint8)
    return out


def generate_files(
    workload: FilesWorkload | str, root: Path, *, seed: int = 0, files: int | None = None
) -> list[Path]:
    """Write the workload's files under ``root`` (skipping ones already there)."""
    wl = FILE_WORKLOADS[workload] if isinstance(workload, str) else workload
    root.mkdir(parents=True, exist_ok=True)
    ext = "jpg" if wl.format == "jpeg" else wl.format
    paths = []
    for i in range(files or wl.files):
        path = root / f"{wl.name}-{i:05d}.{ext}"
        paths.append(path)
        if path.exists():
            continue
        if wl.format == "jpeg":
            data = encode("jpeg", _photo(seed * 1_000_003 + i, wl.shape), quality=90)
        else:
            data = encode(wl.format, synthetic_arrays(wl.format, seed=seed * 1_000_003 + i,
                                                      shape=wl.shape))  # fmt: skip
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.rename(path)
    return paths


def upload_files(paths: Sequence[Path], endpoint: Any, bucket: str, prefix: str) -> None:
    """Put each file at ``prefix/<name>`` in ``bucket`` (``endpoint``: an S3Endpoint)."""
    client = endpoint.boto3_client()
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda p: client.put_object(
                    Bucket=bucket, Key=f"{prefix}/{p.name}", Body=p.read_bytes()
                ),
                paths,
            )
        )


@contextmanager
def s3_endpoint(latency_ms: float | None = None) -> Iterator[tuple[Any, dict[str, Any]]]:
    """A moto server (and a latency proxy in front when ``latency_ms``) for one run.

    Yields the server and the store options that reach it (through the proxy).
    """
    from headrace.emulate import LatencyProxy, LocalS3

    with LocalS3() as server:
        options = server.info.store_options()
        if not latency_ms:
            yield server, options
            return
        with LatencyProxy(server.endpoint, latency_ms=latency_ms) as proxy:
            options["endpoint"] = proxy.endpoint
            yield server, options


# -- one variant (runs in a child process) -----------------------------------------------


def _digests(per_sample: list[str]) -> dict[str, str]:
    return {
        "digest": hashlib.sha256("".join(per_sample).encode()).hexdigest(),
        "canonical_digest": hashlib.sha256("".join(sorted(per_sample)).encode()).hexdigest(),
    }


def _raw_digest(data: Any) -> str:
    return sample_digests({"bytes": np.array([np.frombuffer(data, dtype=np.uint8)])})[0]


def _run_variant(spec: dict[str, Any]) -> dict[str, Any]:
    from headrace.pipeline import Loader

    wl = FilesWorkload(**spec["workload"])
    variant, where, options = spec["variant"], spec["where"], spec["store_options"]
    seed = spec["seed"]
    per: list[str] = []
    decode = variant not in ("headrace-raw", "ceiling")
    src = FileSource(
        where,
        store_options=options,
        format=wl.format,
        decode=decode,
        in_flight=wl.in_flight,
        mode="map-style" if variant == "map-style" else "headrace",
    )
    n = len(src.files)
    steps = n // wl.batch_size
    t0 = time.perf_counter()
    if variant == "ceiling":
        if src.files.store is not None:
            store = src.files.store
            parts = store.get_many(src.files.keys, max_in_flight=wl.in_flight)
            in_flight = store.stats.max_in_flight_observed
        else:
            with ThreadPoolExecutor(wl.in_flight) as pool:
                parts = list(pool.map(src.files.fetch, range(n)))
            in_flight = wl.in_flight
        elapsed = time.perf_counter() - t0
        per = [_raw_digest(p) for p in parts]
        samples, nbytes = n, sum(memoryview(p).nbytes for p in parts)
        del parts
    elif variant == "iterable":
        it = IterableFiles(src, batch_size=wl.batch_size, in_flight=wl.in_flight)
        samples = 0
        for b in it.epoch(seed, 0):
            per += sample_digests({k: v for k, v in b.items() if k != "index"})
            samples += len(b["index"])
        elapsed = time.perf_counter() - t0
        in_flight, nbytes = it.stats.max_in_flight_observed, it.stats.bytes
    else:
        with Loader(
            src,
            batch_size=wl.batch_size,
            seed=seed,
            steps=steps,
            prefetch=wl.prefetch,
            chunk_steps=wl.chunk_steps,
        ) as loader:
            samples = 0
            for b in loader:
                per += sample_digests({k: v for k, v in b.items() if k != "index"})
                samples += len(b["index"])
            elapsed = time.perf_counter() - t0
        in_flight, nbytes = src.stats.max_in_flight_observed, src.stats.bytes
    held = src.stats.peak_held_bytes
    # Bytes of the samples delivered (speculative read-ahead past the end is not output).
    nbytes = min(nbytes, samples * sum(src.files.sizes) // n)
    src.close()
    return {
        "workload": wl.name,
        "variant": variant,
        "storage": spec["storage"],
        "latency_ms": spec["latency_ms"],
        "files": n,
        "samples": samples,
        "seconds": round(elapsed, 3),
        "samples_per_s": round(samples / elapsed, 1),
        "mb_per_s": round(nbytes / elapsed / 1e6, 1),
        "in_flight_observed": in_flight,
        "peak_held_bytes": held,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        **_digests(per),
    }


def run_files_bench(
    workload: str = "jpeg",
    storage: str = "local",
    *,
    latency_ms: float | None = None,
    variants: Sequence[str] = FILE_VARIANTS,
    files: int | None = None,
    in_flight: int | None = None,
    seed: int = 0,
    root: Path | None = None,
) -> list[dict[str, Any]]:
    """Generate (or reuse) the dataset, serve it, and run each variant; one dict per variant."""
    if workload not in FILE_WORKLOADS:
        raise ConfigError(f"workload must be one of {sorted(FILE_WORKLOADS)} (got {workload!r}).")
    if storage not in ("local", "s3"):
        raise ConfigError(f"storage must be 'local' or 's3' (got {storage!r}).")
    bad = [v for v in variants if v not in FILE_VARIANTS]
    if bad:
        raise ConfigError(f"unknown variants {bad}; choose from {FILE_VARIANTS}.")
    wl = FILE_WORKLOADS[workload]
    wl = replace(wl, files=files or wl.files, in_flight=in_flight or wl.in_flight)
    import tempfile

    base = root or Path(tempfile.gettempdir()) / "headrace-bench-files"
    data_dir = base / f"{wl.name}-s{seed}-n{wl.files}"
    paths = generate_files(wl, data_dir, seed=seed)
    spec = {"workload": asdict(wl), "seed": seed, "storage": storage, "latency_ms": latency_ms}
    ctx = multiprocessing.get_context("spawn")

    def run_all(where: str, options: dict[str, Any] | None) -> list[dict[str, Any]]:
        out = []
        for v in variants:
            with ctx.Pool(1) as pool:
                job = {**spec, "variant": v, "where": where, "store_options": options}
                out.append(pool.apply(_run_variant, (job,)))
        return out

    if storage == "local":
        return run_all(str(data_dir), None)
    with s3_endpoint(latency_ms) as (server, options):
        server.create_bucket("bench")
        upload_files(paths, server.info, "bench", wl.name)
        return run_all(f"s3://bench/{wl.name}", options)
