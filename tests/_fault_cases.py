"""The read paths of the fault matrix (tests/integration/test_fault_matrix_s3*.py,
tests/formats/test_fault_matrix_local.py): each writes its files into a folder and opens
a source on that folder or on an S3 prefix holding the same files; a fault aims at one
file (the victim), whose samples :attr:`Case.split` tells from the others'."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from _mds_files import write_mds
from _tar_shards import shards
from headrace.formats import FileSource, MDSSource, TableSource
from headrace.formats._tfrecord import encode_example, encode_tfrecord
from headrace.testing import batch_digest

Source = Any


@dataclass(frozen=True)
class Case:
    """``build(root)`` writes the local files; ``open(where, options)`` opens a source on
    a local folder (``options`` None) or an S3 prefix; ``victim`` is the name of the
    file faults aim at; ``split(src)`` gives the samples off the victim and on it."""

    build: Callable[[Path], None]
    open: Callable[[str, dict[str, Any] | None], Source]
    victim: str
    split: Callable[[Source, str], tuple[np.ndarray, np.ndarray]]
    needs: str | None = None


def _by_files(src: FileSource, victim: str) -> tuple[np.ndarray, np.ndarray]:
    n = src.samples_per_epoch
    samples = np.arange(n, dtype=np.int64)
    files, _ = src.plan.locate(0, samples)
    names = [src.files.name(i).rsplit("/", 1)[-1] for i in range(len(src.files))]
    on = files == names.index(victim)
    return samples[~on], samples[on]


def _by_rows(counts: list[int], index: int) -> Callable[[Source, str], Any]:
    starts = np.cumsum([0, *counts])

    def split(src: Source, victim: str) -> tuple[np.ndarray, np.ndarray]:
        samples = np.arange(starts[-1], dtype=np.int64)
        on = (samples >= starts[index]) & (samples < starts[index + 1])
        return samples[~on], samples[on]

    return split


def _files(fmt: str, **kw: Any) -> Callable[[str, dict[str, Any] | None], Source]:
    def open_(where: str, options: dict[str, Any] | None) -> Source:
        return FileSource(where, store_options=options, format=fmt, **kw)

    return open_


def _tars(root: Path) -> None:
    shards(root)


def _tfrecords(root: Path) -> None:
    for i, n in enumerate([6, 7, 8, 5]):
        rng = np.random.default_rng(i)
        arrays = {
            "image": rng.integers(0, 256, (n, 16 << 10), dtype=np.uint8),
            "label": rng.integers(0, 1000, (n, 1)),
        }
        (root / f"train-{i}.tfrecord").write_bytes(encode_tfrecord(arrays))


def _array_records(root: Path) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter

    for i, n in enumerate([20, 30, 25]):
        rng = np.random.default_rng(i)
        writer = ArrayRecordWriter(str(root / f"train-{i}.array_record"), "group_size:2")
        for j in range(n):
            image = rng.integers(0, 256, 16 << 10, dtype=np.uint8)
            writer.write(encode_example({"image": image, "label": np.array([j + 100 * i])}))
        writer.close()


MDS_COLUMNS = {"id": "int", "text": "str", "x": "ndarray:float32:16"}


def _mds(compression: str | None) -> Callable[[Path], None]:
    def build(root: Path) -> None:
        rng = np.random.default_rng(5)
        samples = [
            {"id": k, "text": "t" * (k % 7), "x": rng.standard_normal(16).astype(np.float32)}
            for k in range(40)
        ]
        write_mds(root, MDS_COLUMNS, samples, per_shard=10, compression=compression)

    return build


def _mds_open(where: str, options: dict[str, Any] | None) -> Source:
    return MDSSource(where, store_options=options, shuffle=False)


ARROW_ROWS = [300, 400, 350]


def _arrow(root: Path) -> None:
    import pyarrow as pa

    for i, n in enumerate(ARROW_ROWS):
        rng = np.random.default_rng(i)
        lens = rng.integers(1, 40, n)
        offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        ids = pa.ListArray.from_arrays(
            pa.array(offs), pa.array(rng.integers(0, 50_000, int(offs[-1]), dtype=np.int32))
        )
        table = pa.table({"ids": ids, "label": np.arange(n, dtype=np.int64) + 1000 * i})
        with (
            pa.OSFile(str(root / f"data-{i:05d}-of-00003.arrow"), "wb") as f,
            pa.ipc.new_file(f, table.schema) as w,
        ):
            w.write_table(table, max_chunksize=64)


def _arrow_open(where: str, options: dict[str, Any] | None) -> Source:
    return TableSource(
        where, store_options=options, columns=["ids", "label"], width=32, truncate=True,
        shuffle=False,
    )  # fmt: skip


def _pngs(root: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(3)
    for i in range(6):
        Image.fromarray(rng.integers(0, 255, (48, 40, 3), dtype=np.uint8)).save(
            root / f"img-{i}.png"
        )


def _npy(root: Path) -> None:
    rng = np.random.default_rng(8)
    for i in range(3):
        np.save(root / f"{i}.npy", rng.standard_normal((16, 32, 64), dtype=np.float32))


def _npy_mapped(root: Path) -> None:
    # Rows of 128 KiB, 8 a read: a local read of 1 MiB, through a map of the file.
    rng = np.random.default_rng(10)
    for i in range(3):
        np.save(root / f"{i}.npy", rng.standard_normal((16, 128, 256), dtype=np.float32))


def _npz(root: Path) -> None:
    rng = np.random.default_rng(9)
    for i in range(3):  # stored, not deflated: read by rows
        np.savez(root / f"{i}.npz", x=rng.standard_normal((16, 32, 64), dtype=np.float32))


CASES: dict[str, Case] = {
    "tar-samples": Case(_tars, _files("tar", shuffle="samples"), "shard-00002.tar", _by_files),
    "tar-files": Case(_tars, _files("tar", shuffle="files"), "shard-00002.tar", _by_files),
    "tfrecord-samples": Case(
        _tfrecords,
        _files("tfrecord", shuffle="samples", tfrecord_ranges_above=0),
        "train-2.tfrecord",
        _by_files,
    ),
    "tfrecord-files": Case(
        _tfrecords, _files("tfrecord", shuffle="files"), "train-2.tfrecord", _by_files
    ),
    "array_record-samples": Case(
        _array_records,
        _files("array_record", shuffle="samples"),
        "train-1.array_record",
        _by_files,
        needs="array_record.python.array_record_module",
    ),
    "mds": Case(_mds(None), _mds_open, "shard.00002.mds", _by_rows([10] * 4, 2)),
    "mds-zstd": Case(
        _mds("zstd"), _mds_open, "shard.00002.mds.zstd", _by_rows([10] * 4, 2), needs="zstandard"
    ),
    "arrow-ipc": Case(
        _arrow, _arrow_open, "data-00001-of-00003.arrow", _by_rows(ARROW_ROWS, 1), "pyarrow"
    ),
    "png-files": Case(_pngs, _files("png", shuffle="files"), "img-4.png", _by_files, "PIL"),
    "npz-rows": Case(
        _npz,
        _files("npz", samples_per_file=16, shuffle="samples", npz_ranges_above=0),
        "1.npz",
        _by_files,
    ),
    "npy-rows": Case(
        _npy,
        _files("npy", samples_per_file=16, shuffle="samples", npy_ranges_above=0),
        "1.npy",
        _by_files,
    ),
    "npy-rows-mapped": Case(
        _npy_mapped,
        _files("npy", samples_per_file="header", shuffle="samples", npy_ranges_above=0),
        "1.npy",
        _by_files,
    ),
}


def build(name: str, root: Path) -> bool:
    """Write case ``name``'s files into ``root``; False where a library it needs is
    missing."""
    case = CASES[name]
    if case.needs is not None:
        try:
            __import__(case.needs)
        except ImportError:
            return False
    root.mkdir(parents=True, exist_ok=True)
    case.build(root)
    return True


def digest(batch: Any) -> str:
    """The SHA-256 of one batch."""
    return batch_digest([batch])


def read(src: Source, samples: np.ndarray, size: int = 8) -> list[str]:
    """The digests of ``samples`` read in batches of ``size``, in order."""
    return [digest(src.read(0, samples[i : i + size])) for i in range(0, samples.size, size)]


def other_bytes(body: bytes, grow: bool) -> bytes:
    """``body`` with every byte of its middle third changed (and one more byte at the
    end when ``grow``): another version of the object."""
    raw = bytearray(body)
    a, b = len(raw) // 3, 2 * len(raw) // 3
    raw[a:b] = bytes((x + 1) % 256 for x in raw[a:b])
    return bytes(raw) + (b"\0" if grow else b"")
