"""The read-ahead's memory bound, per format, storage and reading mode (issue 5).

Held bytes (fetched and not yet decoded, or in flight) stay within the window's
depth times the largest object, and no more requests than that depth are in
flight: counted by the readers' own counters (the window's ``stats``, and on S3
the store's GETs in flight), not RSS. The loader's prefetch queue holds decoded
batches on top of this, bounded by its own length.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from headrace.emulate import LatencyProxy
from headrace.formats import FileSource, IterableFiles
from headrace.formats._files import synthetic_arrays, write_sample_file
from headrace.pipeline import Loader

pytestmark = pytest.mark.integration

FILES = 6
IN_FLIGHT = 3
MiB = 1 << 20


def _hdf5(path: Path, i: int) -> None:
    # 8 or 16 rows of 256 KiB: 2 and 4 MiB files, either side of the S3 cases' threshold
    # (3 MiB), so that some are fetched whole and others by ranges, at once.
    rows = 16 if i % 2 else 8
    x = np.random.default_rng(i).integers(0, 256, (rows, 512, 512), dtype=np.uint8)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=x, chunks=(1, 512, 512), compression="gzip")


def _npz(path: Path, i: int, compress: bool) -> None:
    x = np.random.default_rng(i).integers(0, 256, (4, 512, 1024), dtype=np.uint8)
    buf = io.BytesIO()
    (np.savez_compressed if compress else np.savez)(buf, x=x, y=np.arange(4) + i)
    path.write_bytes(buf.getvalue())


def _array(path: Path, i: int, fmt: str) -> None:
    arrays = synthetic_arrays(fmt, seed=i, shape=(512, 1024), samples_per_file=4)  # 2 MiB
    write_sample_file(fmt, path, arrays)


def _image(path: Path, i: int, fmt: str) -> None:
    shape = (1024, 1536, 3) if fmt == "jpeg" else (768, 1024, 3)  # ~1 and ~2 MB
    options = {"compress_level": 1} if fmt == "png" else {}
    write_sample_file(fmt, path, synthetic_arrays(fmt, seed=i, shape=shape), **options)


# name -> (extension, write(path, i), FileSource options)
CASES: dict[str, tuple[str, Callable[[Path, int], None], dict[str, Any]]] = {
    "npy": ("npy", lambda p, i: _array(p, i, "npy"), {"format": "npy", "samples_per_file": 4}),
    "npz": ("npz", lambda p, i: _npz(p, i, False), {"format": "npz", "samples_per_file": 4}),
    "npz-deflated": (
        "npz",
        lambda p, i: _npz(p, i, True),
        {"format": "npz", "samples_per_file": 4},
    ),
    "jpeg": ("jpg", lambda p, i: _image(p, i, "jpeg"), {"format": "jpeg"}),
    "png": ("png", lambda p, i: _image(p, i, "png"), {"format": "png"}),
    # Counts given, not read from headers: reading them is not the read-ahead (and has
    # its own bound, in_flight headers at a time).
    "hdf5": (
        "h5",
        _hdf5,
        {"format": "hdf5", "datasets": ("x",), "samples_per_file": [8, 16] * (FILES // 2)},
    ),
}


@pytest.fixture(scope="module")
def sets(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("memory")
    client = s3.server.info.boto3_client()
    for name, (ext, write, _) in CASES.items():
        (root / name).mkdir()
        for i in range(FILES):
            path = root / name / f"f{i}.{ext}"
            write(path, i)
            key = f"memory/{name}/{path.name}"
            client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
    return root


@pytest.mark.parametrize("mode", ["headrace", "map-style", "iterable"])
@pytest.mark.parametrize("storage", ["local", "s3"])
@pytest.mark.parametrize("name", list(CASES))
def test_held_bytes_and_requests_stay_within_in_flight(
    s3: S3Fixture, proxy: LatencyProxy, sets: Path, name: str, storage: str, mode: str
) -> None:
    options = dict(CASES[name][2])
    if storage == "s3":
        proxy.latency_ms = 20  # GETs long enough to overlap
        options["store_options"] = {**s3.options(), "retry": FAST_RETRY, "endpoint": proxy.endpoint}
        if name == "hdf5":
            options["hdf5_ranges_above"] = 3 * MiB
        where: Any = f"s3://{BUCKET}/memory/{name}"
    else:
        where = sets / name
        if name == "npy":
            options["npy_ranges_above"] = MiB  # by rows (auto: from 3.5 MiB locally)
    reading = "map-style" if mode == "map-style" else "headrace"
    src = FileSource(where, in_flight=IN_FLIGHT, shuffle="samples", mode=reading, **options)
    try:
        depth = 1 if mode == "map-style" else IN_FLIGHT
        if mode == "iterable":
            it = IterableFiles(src, batch_size=4)
            batches = sum(1 for _ in it.epoch(0, 0))
            stats = it.stats
        else:
            with Loader(src, batch_size=8, seed=0, steps=3) as loader:
                batches = sum(1 for _ in loader)
            stats = src.stats
        assert batches >= 1
        largest = max(src.files.sizes)
        assert largest > MiB // 2  # large-ish objects: what the bound is about
        assert 0 < stats.peak_held_bytes <= depth * largest
        assert 1 <= stats.max_in_flight_observed <= depth
        if storage == "s3":
            # GETs, whole or by ranges (HDF5 above 3 MiB), not one more than the depth.
            assert 1 <= src.files.store.stats.max_in_flight_observed <= depth
    finally:
        src.close()
        proxy.latency_ms = 0
