"""The files the fuzz tests mutate: how each pristine file is made, and how it is read.

A target names one file (``file``) that the tests mutate; ``companions`` writes the
files beside it that stay pristine (the ``.bin`` of a mutated ``.idx``, the other
samples of a dataset); ``read`` opens the case's folder the way a user would and
returns the bytes of a few batches. Files are small so that a case reads in
milliseconds: the cost of a case is the loader's start-up, not its data.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np

SEED = 1234


@dataclass(frozen=True, kw_only=True)
class Target:
    file: str
    pristine: Callable[[], bytes]
    companions: Callable[[Path], None]
    read: Callable[[Path], bytes]
    #: whether its errors must name ``file`` (a loader state is not read from a file)
    names_file: bool = True
    #: read from object storage: each case's folder is uploaded, and ``read`` gets the
    #: folder whose name is the case's key under ``HEADRACE_FUZZ_S3``'s base URL
    remote: bool = False


def _batches(source: Any, *, batch_size: int = 4, steps: int = 3) -> bytes:
    from headrace.pipeline import Loader

    out = io.BytesIO()
    with Loader(source, batch_size=batch_size, seed=SEED, prefetch=0) as loader:
        for step, batch in enumerate(loader):
            for key in sorted(batch):
                value = batch[key]
                out.write(key.encode())
                if isinstance(value, np.ndarray):
                    out.write(str((value.dtype, value.shape)).encode())
                    out.write(np.ascontiguousarray(value).tobytes())
                else:
                    out.write(repr(value).encode())
            if step + 1 == steps:
                break
    return out.getvalue()


def _nothing(_: Path) -> None:
    pass


def _made(write: Callable[[Path], None], name: str) -> Callable[[], bytes]:
    """The bytes of ``name`` as ``write`` leaves it in a fresh folder (made once)."""

    @cache
    def pristine() -> bytes:
        with tempfile.TemporaryDirectory() as d:
            write(Path(d))
            return (Path(d) / name).read_bytes()

    return pristine


def _copies(write: Callable[[Path], None], names: Iterable[str]) -> Callable[[Path], None]:
    """Write the companions ``names`` as ``write`` makes them, once, then copy them."""
    names = list(names)

    @cache
    def made() -> dict[str, bytes]:
        with tempfile.TemporaryDirectory() as d:
            write(Path(d))
            return {n: (Path(d) / n).read_bytes() for n in names}

    def companions(d: Path) -> None:
        for n, data in made().items():
            (d / n).parent.mkdir(parents=True, exist_ok=True)
            (d / n).write_bytes(data)

    return companions


def _target(write: Callable[[Path], None], file: str, others: Iterable[str], read: Any) -> Target:
    return Target(
        file=file, pristine=_made(write, file), companions=_copies(write, others), read=read
    )


# --- row files -------------------------------------------------------------------------


def _rows() -> np.ndarray:
    return (np.arange(16 * 9, dtype=np.uint16) * 7 % 1000).reshape(16, 9)


def _write_rows_npy(d: Path) -> None:
    from headrace.formats import write_row_file

    write_row_file(d / "r.npy", _rows())


def _write_rows_raw(d: Path) -> None:
    from headrace.formats import write_row_file

    write_row_file(d / "r.bin", _rows())


def _read_rows(name: str) -> Callable[[Path], bytes]:
    def read(d: Path) -> bytes:
        from headrace.formats import PaddedRows

        return _batches(PaddedRows(d / name, context=8))

    return read


# --- token files ---------------------------------------------------------------------


def _tokens() -> np.ndarray:
    return (np.arange(600, dtype=np.uint16) * 31 % 5000).astype(np.uint16)


def _write_megatron(d: Path) -> None:
    from headrace.formats import write_megatron_index

    _tokens().tofile(d / "x.bin")
    write_megatron_index(d / "x.idx", np.uint16, np.array([100, 250, 50, 200]))


def _write_token_sidecar(d: Path) -> None:
    from headrace.formats import write_token_sidecar

    _tokens().tofile(d / "t.bin")
    write_token_sidecar(d / "t.bin", np.uint16)


def _read_tokens(name: str, **options: Any) -> Callable[[Path], bytes]:
    def read(d: Path) -> bytes:
        from headrace.formats import TokenSource

        return _batches(TokenSource(d / name, context=8, **options))

    return read


# --- sample files (NPY, NPZ, JPEG, PNG, HDF5) ----------------------------------------

_FILE_SHAPES = {"jpeg": (24, 20, 3), "png": (24, 20, 3)}


def _write_files(fmt: str, ext: str, **options: Any) -> Callable[[Path], None]:
    def write(d: Path) -> None:
        from headrace.formats import synthetic_arrays, write_sample_file

        for k, name in enumerate("abc"):
            per_file = 1 if fmt in _FILE_SHAPES else 3
            arrays = synthetic_arrays(
                fmt,
                seed=k,
                shape=_FILE_SHAPES.get(fmt, (4, 5)),
                samples_per_file=per_file,
                dtype="uint8" if fmt in _FILE_SHAPES else "float32",
            )
            write_sample_file(fmt, d / f"{name}.{ext}", arrays, **options)

    return write


def _write_png16(d: Path) -> None:
    """16-bit RGB PNGs (written unfiltered by ``encode``), decoded by two Pillow passes."""
    from headrace.formats import synthetic_arrays, write_sample_file

    for k, name in enumerate("abc"):
        a = synthetic_arrays("png", seed=k, shape=_FILE_SHAPES["png"])
        write_sample_file("png", d / f"{name}.png", np.asarray(a).astype(np.uint16) * 257 + k)


def _write_tar_pax(d: Path) -> None:
    """Tar shards whose keys are over 100 bytes: each member behind a PAX header."""
    import tarfile

    for k, name in enumerate("abc"):
        with tarfile.open(d / f"{name}.tar", "w", format=tarfile.PAX_FORMAT) as tar:
            for i in range(3):
                key = f"{'k' * 100}/{k}{i}"
                for field, data in (("cls", str(i).encode()), ("txt", f"t{i}".encode())):
                    info = tarfile.TarInfo(f"{key}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


def _read_files(fmt: str, **options: Any) -> Callable[[Path], bytes]:
    def read(d: Path) -> bytes:
        from headrace.formats import FileSource

        return _batches(FileSource(d, format=fmt, **options), batch_size=3, steps=2)

    return read


def _files(fmt: str, ext: str, write_options: dict[str, Any], **options: Any) -> Target:
    write = _write_files(fmt, ext, **write_options)
    return _target(write, f"a.{ext}", [f"b.{ext}", f"c.{ext}"], _read_files(fmt, **options))


# --- tables ----------------------------------------------------------------------------


#: Rows of the tables, written in record batches (row groups) of ``TABLE_BATCH``.
TABLE_ROWS, TABLE_BATCH = 40, 16


def table_ids(rows: range) -> list[list[int]]:
    return [list(range(i % 7 + 1)) for i in rows]


def _table(lists_only: bool = False) -> Any:
    import pyarrow as pa

    n = TABLE_ROWS
    columns = {
        "input_ids": pa.array(table_ids(range(n)), type=pa.list_(pa.int32())),
        "label": pa.array(np.arange(n, dtype=np.int64)),
    }
    if not lists_only:
        columns["emb"] = pa.array([[i, -i] for i in range(n)], type=pa.list_(pa.float32(), 2))
        columns["text"] = pa.array([f"row {i}" * (i % 3) for i in range(n)])
    return pa.table(columns)


def _write_parquet(d: Path) -> None:
    import pyarrow.parquet as pq

    pq.write_table(_table(), d / "t.parquet", row_group_size=TABLE_BATCH)


def _write_arrow_file(d: Path) -> None:
    import pyarrow as pa

    t = _table()
    with pa.OSFile(str(d / "t.arrow"), "wb") as sink, pa.ipc.new_file(sink, t.schema) as w:
        w.write_table(t, max_chunksize=TABLE_BATCH)


def _write_arrow_stream(d: Path, lists_only: bool = False) -> None:
    import pyarrow as pa

    t = _table(lists_only)
    with pa.OSFile(str(d / "t.arrow"), "wb") as sink, pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t, max_chunksize=TABLE_BATCH)


def _write_saved(d: Path) -> None:
    import datasets

    datasets.Dataset(_table()).save_to_disk(str(d / "saved"), num_shards=2)


def _read_table(name: str) -> Callable[[Path], bytes]:
    def read(d: Path) -> bytes:
        from headrace.formats import TableSource

        return _batches(TableSource(d / name, width=16))

    return read


# --- bench configs: a workload TOML (-w) and a DLIO YAML (--dlio) -------------------

_REPO = Path(__file__).resolve().parents[2]


def _copy_of(source: Path, name: str) -> Callable[[Path], None]:
    def write(d: Path) -> None:
        (d / name).write_bytes(source.read_bytes())

    return write


def _read_bench(flag: str, name: str) -> Callable[[Path], bytes]:
    """``headrace bench --list`` on the file, as the CLI runs it, then the checks a run
    makes before it starts; a refusal must be one line on stderr, exit status 2."""

    def read(d: Path) -> bytes:
        from contextlib import redirect_stderr, redirect_stdout

        from headrace.cli import check, command_parser, main
        from headrace.errors import ConfigError

        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = main(["bench", "--list", flag, str(d / name)])
        lines = err.getvalue().strip().splitlines()
        if rc != 0:
            if rc == 2 and len(lines) == 1 and lines[0].startswith("headrace bench: "):
                raise ConfigError(lines[0])  # the CLI's one line, as the harness checks it
            raise AssertionError(f"exit status {rc}, stderr not one line: {err.getvalue()}")
        args = command_parser("bench").parse_args([flag, str(d / name), "--root", str(d)])
        check("bench", args)
        return out.getvalue().encode()

    return read


# --- a loader's saved state, tampered with --------------------------------------------


def _state_loader(d: Path) -> Any:
    from headrace.formats import TokenSource
    from headrace.pipeline import Loader

    source = TokenSource(d / "t.bin", context=8, dtype="uint16")
    return Loader(source, batch_size=4, seed=SEED, prefetch=0)


def _write_state(d: Path) -> None:
    import json

    _tokens().tofile(d / "t.bin")
    with _state_loader(d) as loader:
        batches = iter(loader)
        next(batches)
        next(batches)
        (d / "state.json").write_text(json.dumps(loader.state_dict()))


def _read_state(d: Path) -> bytes:
    """The next two batches after loading the state, as a resumed run reads them."""
    import json

    out = io.BytesIO()
    with _state_loader(d) as loader:
        loader.load_state_dict(json.loads((d / "state.json").read_bytes()))
        for step, batch in enumerate(loader):
            out.write(b"".join(np.ascontiguousarray(batch[k]).tobytes() for k in sorted(batch)))
            if step == 1:
                break
    return out.getvalue()


# --- the same files on object storage (the harness uploads each case's folder) -----

#: Where the harness put the cases: a JSON object with ``base`` (``s3://bucket/prefix``;
#: case ``NNNN``'s files are under ``base/NNNN/``) and ``options`` (the store's, no retry).
S3_ENV = "HEADRACE_FUZZ_S3"


def case_url(d: Path, name: str = "") -> tuple[str, dict[str, Any]]:
    """The URL of case folder ``d`` (or of ``name`` in it) and the store options."""
    import json
    import os

    from headrace.io import RetryPolicy

    where = json.loads(os.environ[S3_ENV])
    # Few, quick retries: moto answers every request; a retry only re-reads bad bytes.
    options = {**where["options"], "retry": RetryPolicy(attempts=2, base_delay_s=0.01)}
    return f"{where['base']}/{d.name}" + (f"/{name}" if name else ""), options


def _read_table_s3(name: str) -> Callable[[Path], bytes]:
    def read(d: Path) -> bytes:
        from headrace.formats import TableSource

        url, options = case_url(d, name)
        return _batches(TableSource(url, width=16, store_options=options))

    return read


def _read_files_s3(fmt: str, **options: Any) -> Callable[[Path], bytes]:
    def read(d: Path) -> bytes:
        from headrace.formats import FileSource

        url, store = case_url(d)
        source = FileSource(url + "/", format=fmt, store_options=store, **options)
        return _batches(source, batch_size=3, steps=2)

    return read


def _read_tokens_s3(name: str, **options: Any) -> Callable[[Path], bytes]:
    def read(d: Path) -> bytes:
        from headrace.formats import TokenSource

        url, store = case_url(d, name)
        return _batches(TokenSource(url, context=8, store_options=store, **options))

    return read


def _remote(local: Target, read: Callable[[Path], bytes]) -> Target:
    return Target(
        file=local.file,
        pristine=local.pristine,
        companions=local.companions,
        read=read,
        remote=True,
    )


def _remote_files(local: str, fmt: str, **options: Any) -> Target:
    return _remote(TARGETS[local], _read_files_s3(fmt, **options))


TARGETS: dict[str, Target] = {
    "rows_npy": _target(_write_rows_npy, "r.npy", [], _read_rows("r.npy")),
    "rows_sidecar": _target(_write_rows_raw, "r.bin.json", ["r.bin"], _read_rows("r.bin")),
    "megatron_idx": _target(_write_megatron, "x.idx", ["x.bin"], _read_tokens("x.bin")),
    "token_sidecar": _target(_write_token_sidecar, "t.bin.json", ["t.bin"], _read_tokens("t.bin")),
    "files_npy": _files("npy", "npy", {}, samples_per_file=3),
    "files_npy_header": _files("npy", "npy", {}, samples_per_file="header"),
    "files_npz_stored": _files("npz", "npz", {}, samples_per_file=3),
    "files_npz_deflated": _files("npz", "npz", {"compress": True}, samples_per_file=3),
    "files_hdf5": _files("hdf5", "h5", {}, samples_per_file=3, datasets=["x"]),
    "files_hdf5_header": _files("hdf5", "h5", {}, samples_per_file="header", datasets=["x"]),
    "files_hdf5_gzip": _files(
        "hdf5", "h5", {"chunks": True, "compression": "gzip"}, samples_per_file=3, datasets=["x"]
    ),
    "files_tar": _files("tar", "tar", {}),
    "files_tar_samples": _files("tar", "tar", {}, shuffle="samples"),
    "files_tar_pax": _target(_write_tar_pax, "a.tar", ["b.tar", "c.tar"], _read_files("tar")),
    "files_tfrecord": _files("tfrecord", "tfrecord", {}),
    "files_tfrecord_records": _files(
        "tfrecord", "tfrecord", {}, shuffle="samples", tfrecord_ranges_above=0
    ),
    "files_jpeg": _files("jpeg", "jpg", {}),
    "files_png": _files("png", "png", {}),
    "files_png16": _target(_write_png16, "a.png", ["b.png", "c.png"], _read_files("png")),
    "parquet": _target(_write_parquet, "t.parquet", [], _read_table("t.parquet")),
    "arrow_file": _target(_write_arrow_file, "t.arrow", [], _read_table("t.arrow")),
    "arrow_stream": _target(_write_arrow_stream, "t.arrow", [], _read_table("t.arrow")),
    "hf_state": _target(
        _write_saved,
        "saved/state.json",
        ["saved/dataset_info.json", *(f"saved/data-0000{k}-of-00002.arrow" for k in (0, 1))],
        _read_table("saved"),
    ),
    "hf_info": _target(
        _write_saved,
        "saved/dataset_info.json",
        ["saved/state.json", *(f"saved/data-0000{k}-of-00002.arrow" for k in (0, 1))],
        _read_table("saved"),
    ),
    "bench_toml": _target(
        _copy_of(_REPO / "src/headrace/bench/workloads/npz.toml", "w.toml"),
        "w.toml",
        [],
        _read_bench("-w", "w.toml"),
    ),
    "dlio_yaml": _target(
        _copy_of(_REPO / "src/headrace/bench/workloads/dlio/unet3d_h100.yaml", "d.yaml"),
        "d.yaml",
        [],
        _read_bench("--dlio", "d.yaml"),
    ),
    "state": Target(
        file="state.json",
        pristine=_made(_write_state, "state.json"),
        companions=_copies(_write_state, ["t.bin"]),
        read=_read_state,
        names_file=False,
    ),
    "arrow_stream_lists": _target(
        partial(_write_arrow_stream, lists_only=True), "t.arrow", [], _read_table("t.arrow")
    ),
}

_H5_RANGES: dict[str, Any] = {"datasets": ["x"], "hdf5_ranges_above": 0}

TARGETS |= {
    "s3_parquet": _remote(TARGETS["parquet"], _read_table_s3("t.parquet")),
    "s3_arrow_file": _remote(TARGETS["arrow_file"], _read_table_s3("t.arrow")),
    "s3_arrow_stream": _remote(TARGETS["arrow_stream"], _read_table_s3("t.arrow")),
    "s3_npy_header": _remote_files("files_npy_header", "npy", samples_per_file="header"),
    "s3_npz_header": _remote(
        TARGETS["files_npz_stored"], _read_files_s3("npz", samples_per_file="header")
    ),
    "s3_npz_deflated": _remote_files("files_npz_deflated", "npz", samples_per_file=3),
    # HDF5 read by ranges (learn_layout, tree_children, SparseImage), as files of 8 MiB
    # and more are by default: these are a few KiB.
    "s3_hdf5": _remote_files("files_hdf5", "hdf5", samples_per_file=3, **_H5_RANGES),
    "s3_hdf5_header": _remote_files(
        "files_hdf5_header", "hdf5", samples_per_file="header", **_H5_RANGES
    ),
    "s3_hdf5_gzip": _remote_files("files_hdf5_gzip", "hdf5", samples_per_file=3, **_H5_RANGES),
    "s3_jpeg": _remote_files("files_jpeg", "jpeg"),
    "s3_png": _remote_files("files_png", "png"),
    "s3_megatron_idx": _remote(TARGETS["megatron_idx"], _read_tokens_s3("x.bin")),
    "s3_token_sidecar": _remote(TARGETS["token_sidecar"], _read_tokens_s3("t.bin")),
}
