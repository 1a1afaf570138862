"""Cases of tests/integration/test_eio_matrix.py, each run in a child process.

``python _eio_cases.py CASE MNT`` reads through a slowfs mount whose READs of
one range of one file fail with EIO, and prints one JSON line: the error the
consumer's call raised (type, whether it is a StorageError, message), and
whether a later read that does not touch the failing range worked. A SIGBUS
kills the child (return code -7) instead of pytest.

:func:`build` writes every case's data into a source directory and returns the
``--fail-reads`` specs; the cases find their failing files and ranges again
from the same layout.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

PAGE = 4096
MIB = 1 << 20

# tokens.bin: 2 Mi uint16 tokens (4 MiB); bytes [2 MiB, 2 MiB + 4 KiB) fail.
TOKENS = 2 * MIB
BAD_TOKENS = (2 * MIB, 2 * MIB + PAGE)
# rows: 4,096 rows of 256 int32 (1 KiB a row); one page in the middle fails.
ROWS, WIDTH = 4096, 256
BAD_ROWS = (2 * MIB + 8 * PAGE, 2 * MIB + 9 * PAGE)
# tables: 64 record batches / row groups of 256 rows.
TABLE_ROWS, BATCH_ROWS = 64 * 256, 256
BAD_BATCH = 40
BIG_BATCH_ROWS = 65_536
BUFFERS = ("values", "validity", "indices", "dictionary")
# files: 64 NPY/NPZ/JPEG/HDF5 files; file 37 fails whole.
NFILES, BAD_FILE = 64, 37


def _inner_pages(lo: int, hi: int) -> tuple[int, int]:
    """The whole pages inside ``[lo, hi)``: a fault there touches that buffer only
    (a page shared with the message header would fail the open instead)."""
    a, b = -(-lo // PAGE) * PAGE, hi // PAGE * PAGE
    assert b > a, f"no whole page in [{lo}, {hi})"
    return a, b


def _table(n: int = TABLE_ROWS) -> Any:
    import pyarrow as pa

    rng = np.random.default_rng(11)
    lens = rng.integers(8, 64, n)
    offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    ids = pa.ListArray.from_arrays(
        pa.array(offs), pa.array(rng.integers(0, 50_000, int(offs[-1]), dtype=np.int32))
    )
    label = rng.integers(0, 1000, n).astype(np.int64)
    mask = np.zeros(n, dtype=bool)
    mask[::7] = True  # every 7th label is null
    words = [f"category-{i:06d}-" + "x" * 24 for i in range(4000)]  # a 130 KiB dictionary
    cat = pa.DictionaryArray.from_arrays(
        pa.array(rng.integers(0, len(words), n).astype(np.int32)), pa.array(words)
    )
    return pa.table({"ids": ids, "label": pa.array(label, mask=mask), "cat": cat})


def _buffer_range(path: Path, index: int, target: str) -> tuple[int, int]:
    """The whole pages of record batch ``index``'s list values, label validity bitmap,
    cat indices or dictionary string data (``target``), as mapped from ``path``."""
    import pyarrow as pa

    mm = pa.memory_map(str(path), "r")
    base = mm.read_buffer(1).address
    mm.seek(0)
    head = mm.read(6)
    mm.seek(0)
    if head == b"ARROW1":
        r = pa.ipc.open_file(mm)
        batch = r.get_batch(index)
    else:
        batch = list(pa.ipc.open_stream(mm))[index]

    def rng(buf: Any) -> tuple[int, int]:
        return _inner_pages(buf.address - base, buf.address - base + buf.size)

    ids, label, cat = batch.column("ids"), batch.column("label"), batch.column("cat")
    buffers = {
        "values": lambda: ids.values.buffers()[1],
        "validity": lambda: label.buffers()[0],
        "indices": lambda: cat.indices.buffers()[1],
        "dictionary": lambda: cat.dictionary.buffers()[2],
    }
    return rng(buffers[target]())


def _header_offset(path: Path, index: int) -> int:
    """Where record batch ``index``'s message starts in the stream at ``path``."""
    import pyarrow as pa

    with pa.OSFile(str(path)) as f:
        r = pa.ipc.MessageReader.open_stream(f)
        seen = -1
        while True:
            at = f.tell()
            msg = r.read_next_message()
            seen += msg.type == "record batch"
            if seen == index:
                return at


def build(src: Path) -> list[str]:
    """Write every case's files into ``src``; the ``--fail-reads`` specs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(5)
    specs = []
    rng.integers(0, 50_000, TOKENS, dtype=np.uint16).tofile(src / "tokens.bin")
    specs.append(f"tokens.bin:{BAD_TOKENS[0]}-{BAD_TOKENS[1]}")
    for name in ("rows", "anchor", "positive"):
        # Ids from 1: 0 is pad_id, which pairs without a mask file refuse between tokens.
        np.save(src / f"{name}.npy", rng.integers(1, 50_000, (ROWS, WIDTH), dtype=np.int32))
    np.save(src / "mask.npy", np.ones((ROWS, WIDTH), dtype=np.int8))
    specs += [f"rows.npy:{BAD_ROWS[0]}-{BAD_ROWS[1]}", f"positive.npy:{BAD_ROWS[0]}-{BAD_ROWS[1]}"]

    table = _table()
    # A validity bitmap of 256 rows is 32 bytes, on its header's page: big batches
    # (8 KiB bitmaps, 256 KiB of indices) give them whole pages of their own.
    big = _table(4 * BIG_BATCH_ROWS)
    for kind, target in [("stream", t) for t in ("header", *BUFFERS)] + [
        ("file", "values"),
        ("file", "validity"),
    ]:
        path = src / f"{kind}-{target}.arrow"
        wide = target in ("validity", "indices")
        t, rows = (big, BIG_BATCH_ROWS) if wide else (table, BATCH_ROWS)
        new = pa.ipc.new_stream if kind == "stream" else pa.ipc.new_file
        with pa.OSFile(str(path), "wb") as f, new(f, t.schema) as w:
            w.write_table(t, max_chunksize=rows)
        if target == "header":  # the page where batch BAD_BATCH's message starts
            lo = _header_offset(path, BAD_BATCH) // PAGE * PAGE
            lo, hi = lo, lo + PAGE
        else:
            lo, hi = _buffer_range(path, 2 if wide else BAD_BATCH, target)
        specs.append(f"{path.name}:{lo}-{hi}")
    pq.write_table(table, src / "t.parquet", row_group_size=BATCH_ROWS)
    md = pq.ParquetFile(src / "t.parquet").metadata.row_group(BAD_BATCH).column(0)
    lo = md.data_page_offset
    specs.append(f"t.parquet:{lo}-{lo + 1}")

    _files(src, rng)
    # NPY files of rows read by rows, 80 KiB a row (more than the 64 KiB a read joins
    # across): a read's rows of a file are several preads, on a mount all at once.
    (src / "npyrows").mkdir()
    for i in range(2):
        np.save(src / "npyrows" / f"r{i}.npy", rng.standard_normal((16, 20480), np.float32))
    lo = (128 + 8 * 81920) // PAGE * PAGE + PAGE  # in row 8 of r1.npy
    specs.append(f"npyrows/r1.npy:{lo}-{lo + PAGE}")
    for kind in ("npy", "npz", "jpeg", "hdf5", "png"):
        specs.append(f"{kind}/f{BAD_FILE:03d}.*")
    specs += _shards(src, rng)
    return specs


# shards: tar, TFRecord, MDS (plain, zstd) and ArrayRecord files of 64 KiB samples;
# one page inside a sample of shard 1 fails. MDS and ArrayRecord files are opened by
# their index or footer, so a read meets it; a walk of tar or TFRecord headers at open
# reads growing spans (a few pages, then more), data and all, and meets it there.
SHARDS, SHARD_SAMPLES, SAMPLE = 3, 12, 64 << 10
BAD_SAMPLE = 7


def _shards(src: Path, rng: np.random.Generator) -> list[str]:
    import io
    import tarfile

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from _mds_files import write_mds
    from headrace.formats._tfrecord import encode_example, encode_tfrecord

    specs = []
    blobs = [
        [rng.integers(0, 256, SAMPLE, dtype=np.uint8) for _ in range(SHARD_SAMPLES)]
        for _ in range(SHARDS)
    ]
    (src / "tar").mkdir()
    for s in range(SHARDS):
        with tarfile.open(src / "tar" / f"s{s}.tar", "w") as tar:
            for i, blob in enumerate(blobs[s]):
                for name, data in ((f"{i:03d}.bin", blob.tobytes()), (f"{i:03d}.cls", b"%d" % i)):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    with tarfile.open(src / "tar" / "s1.tar") as tar:
        m = tar.getmember(f"{BAD_SAMPLE:03d}.bin")
        lo, _ = _inner_pages(m.offset_data, m.offset_data + m.size)
    specs.append(f"tar/s1.tar:{lo}-{lo + PAGE}")

    (src / "tfrecord").mkdir()
    for s in range(SHARDS):
        arrays = {"x": np.stack(blobs[s]), "label": np.arange(SHARD_SAMPLES)[:, None]}
        (src / "tfrecord" / f"s{s}.tfrecord").write_bytes(encode_tfrecord(arrays))
    raw = (src / "tfrecord" / "s1.tfrecord").read_bytes()
    at = 0
    for _ in range(BAD_SAMPLE):  # each record: length (8), its CRC (4), data, CRC (4)
        at += 16 + int.from_bytes(raw[at : at + 8], "little")
    n = int.from_bytes(raw[at : at + 8], "little")
    lo, _ = _inner_pages(at + 12, at + 12 + n)
    specs.append(f"tfrecord/s1.tfrecord:{lo}-{lo + PAGE}")

    samples = [{"x": b} for blobs_s in blobs for b in blobs_s]
    for name, codec in (("mds", None), ("mdszstd", "zstd")):
        paths = write_mds(
            src / name, {"x": "ndarray:uint8"}, samples, per_shard=SHARD_SAMPLES,
            compression=codec,
        )  # fmt: skip
        mid = paths[1].stat().st_size // 2 // PAGE * PAGE  # inside a sample
        specs.append(f"{name}/{paths[1].name}:{mid}-{mid + PAGE}")

    try:
        from array_record.python.array_record_module import ArrayRecordWriter
    except ImportError:
        return specs
    (src / "array_record").mkdir()
    for s in range(SHARDS):
        writer = ArrayRecordWriter(str(src / "array_record" / f"s{s}.array_record"), "group_size:1")
        for i, blob in enumerate(blobs[s]):
            writer.write(encode_example({"x": blob, "label": np.array([i])}))
        writer.close()
    # Chunks in the middle: the open reads the postscript and footer at the end only.
    mid = (src / "array_record" / "s1.array_record").stat().st_size // 2 // PAGE * PAGE
    specs.append(f"array_record/s1.array_record:{mid}-{mid + PAGE}")
    return specs


def _files(src: Path, rng: np.random.Generator) -> None:
    from PIL import Image

    for kind in ("npy", "npz", "jpeg", "hdf5", "png"):
        (src / kind).mkdir()
    import h5py

    for i in range(NFILES):
        a = rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)
        np.save(src / "npy" / f"f{i:03d}.npy", a)
        np.savez_compressed(src / "npz" / f"f{i:03d}.npz", x=a)
        Image.fromarray(a).save(src / "jpeg" / f"f{i:03d}.jpeg", quality=90)
        Image.fromarray(a).save(src / "png" / f"f{i:03d}.png")
        with h5py.File(src / "hdf5" / f"f{i:03d}.h5", "w") as h:
            h.create_dataset("x", data=a)


# the cases --------------------------------------------------------------------


def OPEN_FAILED() -> None:
    """The later read of a case whose open failed: there is nothing to read on."""


def _everything(n: int, chunk: int = 256) -> list[np.ndarray]:
    return [np.arange(i, min(i + chunk, n), dtype=np.int64) for i in range(0, n, chunk)]


def tokens(mnt: Path, reads: str) -> tuple[BaseException, Callable[[], Any]]:
    from headrace.formats import TokenSource

    src = TokenSource(
        mnt / "tokens.bin",
        dtype="uint16",
        context=255,
        shuffle=False,
        reads=reads,
        block_bytes=256 << 10,
    )
    n = src.samples_per_epoch
    return _first_error(src, n)


def _first_error(src: Any, n: int) -> tuple[BaseException, Callable[[], Any]]:
    """Read samples ``0..n`` in batches of 64 until one fails: that error, and a read of
    the first 4 samples (away from the failing bytes) to try after it."""
    return _first_error_in(src, n, 64)


def _first_error_in(src: Any, n: int, batch: int) -> tuple[BaseException, Callable[[], Any]]:
    """:func:`_first_error` in batches of ``batch``."""
    try:
        for s in _everything(n, batch):
            src.read(0, s)
    except BaseException as exc:
        return exc, lambda: src.read(0, np.arange(4, dtype=np.int64))
    raise AssertionError("no error")


def rows(mnt: Path, reader: str) -> tuple[BaseException, Callable[[], Any]]:
    from headrace.formats import PaddedRows

    src = PaddedRows(
        mnt / "rows.npy", mnt / "mask.npy", context=WIDTH - 1, shuffle=False, reader=reader
    )
    return _first_error(src, ROWS)


def pairs(mnt: Path, reader: str) -> tuple[BaseException, Callable[[], Any]]:
    from headrace.formats import PairRows

    src = PairRows(
        {"anchor": mnt / "anchor.npy", "positive": mnt / "positive.npy"},
        shuffle=False,
        reader=reader,
    )
    return _first_error(src, ROWS)


def table(
    mnt: Path, name: str, columns: list[str], n: int = TABLE_ROWS, later: list[str] | None = None
) -> tuple[BaseException, Callable[[], Any]]:
    """Read every row of ``columns``; later, the first rows (of ``later`` columns)."""
    from headrace.formats import Table

    try:
        tb = Table.open(mnt / name, columns=sorted({*columns, *(later or [])}))
    except BaseException as exc:  # a failed header: no table to read on
        return exc, OPEN_FAILED
    valid = np.flatnonzero(np.arange(n) % 7 != 0)  # label is null on every 7th row
    step = max(97, valid.size // 64)
    try:
        for i in range(0, valid.size, step):
            tb.read_rows(valid[i : i + step], columns)
    except BaseException as exc:
        return exc, lambda: tb.read_rows(valid[:4], later or columns)
    raise AssertionError("no error")


def files(mnt: Path, kind: str) -> tuple[BaseException, Callable[[], Any]]:
    from headrace.formats import FileSource

    fmt = {"npy": "npy", "npz": "npz", "jpeg": "jpeg", "hdf5": "hdf5", "png": "png"}[kind]
    extra = {"datasets": ("x",)} if kind == "hdf5" else {}
    src = FileSource(mnt / kind, format=fmt, shuffle="none", **extra)
    try:
        src.read(0, np.arange(NFILES, dtype=np.int64))
    except BaseException as exc:
        return exc, lambda: src.read(0, np.arange(4, dtype=np.int64))
    raise AssertionError("no error")


def npy_rows(mnt: Path) -> tuple[BaseException, Callable[[], Any]]:
    """Every sample in batches of 6 (random rows of both files, by rows); later, 4."""
    from headrace.formats import FileSource

    src = FileSource(mnt / "npyrows", format="npy", samples_per_file=16, shuffle="samples",
                     npy_ranges_above=0)  # fmt: skip
    return _first_error_in(src, 32, 6)


def shards(mnt: Path, kind: str) -> tuple[BaseException, Callable[[], Any]]:
    """Read every sample of the shards, in order; later, the first shard's first 4."""
    n = SHARDS * SHARD_SAMPLES
    if kind in ("mds", "mdszstd"):
        from headrace.formats import MDSSource

        src: Any = MDSSource(mnt / kind, shuffle=False)
    else:
        from headrace.formats import FileSource

        extra = {"tfrecord_ranges_above": 0} if kind == "tfrecord" else {}
        try:
            src = FileSource(mnt / kind, format=kind, shuffle="samples", **extra)
        except BaseException as exc:  # a walk of tar or TFRecord headers at open: it reads
            return exc, OPEN_FAILED  # growing spans, the failing page among them
    everything = np.arange(n, dtype=np.int64)
    if kind not in ("mds", "mdszstd"):
        files, _ = src.plan.locate(0, everything)
        first = everything[files == 0][:4]
    else:
        first = everything[:4]
    try:
        for s in _everything(n, 6):
            src.read(0, s)
    except BaseException as exc:
        return exc, lambda: src.read(0, first)
    raise AssertionError("no error")


def _prefetching() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "headrace-prefetch"]


def loader(mnt: Path, what: str) -> tuple[BaseException, Callable[[], Any]]:
    from headrace.formats import PaddedRows, TokenSource
    from headrace.pipeline import Loader

    if what == "arrow":  # the windowed shuffle: record batches read ahead, on the pool
        from headrace.formats import TableSource

        src = TableSource(
            mnt / "stream-values.arrow",
            columns=["ids"],
            width=64,
            truncate=True,
            shuffle="window",
            window_rows=2048,
        )
    elif what == "mds":  # compressed shards: the next window's decompressed ahead
        from headrace.formats import MDSSource

        src = MDSSource(mnt / "mdszstd", shuffle="window", window_rows=SHARD_SAMPLES)
    elif what == "tokens":
        src: Any = TokenSource(
            mnt / "tokens.bin", dtype="uint16", context=255, shuffle=False, block_bytes=256 << 10
        )
    else:
        src = PaddedRows(mnt / "rows.npy", mnt / "mask.npy", context=WIDTH - 1, shuffle=False)
    ld = Loader(src, batch_size=32, prefetch=8)
    try:
        for _ in ld:
            pass
    except BaseException as exc:
        # The read-ahead thread ends by itself once its error is handed over (no close).
        deadline = time.monotonic() + 10
        while _prefetching() and time.monotonic() < deadline:
            time.sleep(0.01)
        alive = _prefetching()
        ld.close()
        if alive:
            raise AssertionError(f"loader threads still running after the error: {alive}") from exc
        return exc, lambda: src.read(0, np.arange(4, dtype=np.int64))
    raise AssertionError("no error")


CASES: dict[str, Callable[[Path], tuple[BaseException, Callable[[], Any]]]] = {
    "tokens-populate": lambda m: tokens(m, "populate"),
    "tokens-pread": lambda m: tokens(m, "pread"),
    "rows-mmap": lambda m: rows(m, "mmap"),
    "rows-adaptive": lambda m: rows(m, "adaptive"),
    "rows-pread": lambda m: rows(m, "pread"),
    "pairs-adaptive": lambda m: pairs(m, "adaptive"),
    "arrow-stream-header": lambda m: table(m, "stream-header.arrow", ["ids", "label"]),
    "arrow-stream-values": lambda m: table(m, "stream-values.arrow", ["ids", "label"]),
    "arrow-stream-validity": lambda m: table(
        m, "stream-validity.arrow", ["label"], 4 * BIG_BATCH_ROWS
    ),
    "arrow-stream-indices": lambda m: table(m, "stream-indices.arrow", ["cat"], 4 * BIG_BATCH_ROWS),
    # Every record batch shares the dictionary: the later read is of another column.
    "arrow-stream-dictionary": lambda m: table(
        m, "stream-dictionary.arrow", ["cat"], later=["ids"]
    ),
    "arrow-file-values": lambda m: table(m, "file-values.arrow", ["ids", "label"]),
    "arrow-file-validity": lambda m: table(m, "file-validity.arrow", ["label"], 4 * BIG_BATCH_ROWS),
    "parquet": lambda m: table(m, "t.parquet", ["ids", "label", "cat"]),
    "files-npy": lambda m: files(m, "npy"),
    "files-npz": lambda m: files(m, "npz"),
    "files-jpeg": lambda m: files(m, "jpeg"),
    "files-hdf5": lambda m: files(m, "hdf5"),
    "files-png": lambda m: files(m, "png"),
    "npy-rows": npy_rows,
    "tar-samples": lambda m: shards(m, "tar"),
    "tfrecord-samples": lambda m: shards(m, "tfrecord"),
    "array_record-samples": lambda m: shards(m, "array_record"),
    "mds": lambda m: shards(m, "mds"),
    "mds-zstd": lambda m: shards(m, "mdszstd"),
    "loader-tokens": lambda m: loader(m, "tokens"),
    "loader-rows": lambda m: loader(m, "rows"),
    "loader-arrow": lambda m: loader(m, "arrow"),
    "loader-mds": lambda m: loader(m, "mds"),
}


def run(case: str, mnt: str) -> dict[str, Any]:
    from headrace.errors import StorageError

    out: dict[str, Any] = {"case": case}
    try:
        err, later = CASES[case](Path(mnt))
    except AssertionError as exc:
        out["harness"] = str(exc)
        return out
    out["type"] = type(err).__name__
    out["storage_error"] = isinstance(err, StorageError)
    out["message"] = str(err)
    out["traceback"] = "".join(traceback.format_exception(err))[-3000:]
    if later is OPEN_FAILED:
        out["later"] = "open failed"
        return out
    try:
        later()
        out["later"] = "ok"
    except BaseException as exc:
        out["later"] = f"{type(exc).__name__}: {exc}"
    return out


if __name__ == "__main__":
    os.environ.setdefault("PYTHONFAULTHANDLER", "1")
    print(json.dumps(run(sys.argv[1], sys.argv[2])), flush=True)
