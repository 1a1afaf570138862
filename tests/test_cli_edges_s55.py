"""Three rough edges of a new user's first commands: a missing extra said before any
work (``bench --storage s3``, ``emulate slowfs``), and ``check FILE`` without
``--format`` answered with the flag to pass."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from headrace.cli import main


def _files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def test_bench_on_s3_without_moto_says_so_before_writing_the_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Fault injection: the emulate extra not installed. Before: the 67 MB token dataset
    # was written first, and only then the run said moto was missing.
    monkeypatch.setitem(sys.modules, "moto", None)
    root = tmp_path / "data"
    args = ["bench", "--storage", "s3", "--steps", "5", "--trials", "1", "-q"]
    assert main([*args, "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert "pip install 'headrace[emulate" in err, err
    assert _files_under(root) == [], _files_under(root)
    assert "Traceback" not in err


def test_emulate_slowfs_without_mfusepy_exits_2_naming_the_install_before_mounting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Fault injection: mfusepy not installed. Before: "slowfs: mounting ..." was printed,
    # then the missing module, with exit 1 (other missing extras exit 2).
    monkeypatch.setitem(sys.modules, "mfusepy", None)
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    assert main(["emulate", "slowfs", str(src), str(mnt)]) == 2
    err = capsys.readouterr().err
    assert "mounting" not in err, err
    assert "pip install 'headrace[emulate]'" in err, err
    assert len(err.strip().splitlines()) == 1, err


def _parquet(p: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1, 2, 3]}), p / "t.parquet")
    return p / "t.parquet"


def _arrow(p: Path) -> Path:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    table = pa.table({"x": [1, 2, 3]})
    with ipc.new_file(str(p / "t.arrow"), table.schema) as w:
        w.write_table(table)
    return p / "t.arrow"


def _npy(p: Path) -> Path:
    np.save(p / "a.npy", np.arange(6, dtype=np.float32))
    return p / "a.npy"


def _npz(p: Path) -> Path:
    np.savez(p / "a.npz", x=np.arange(6))
    return p / "a.npz"


def _tar(p: Path) -> Path:
    with tarfile.open(p / "shard-000.tar", "w") as tf:
        data = b"hello"
        info = tarfile.TarInfo("0.txt")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return p / "shard-000.tar"


def _megatron(p: Path) -> Path:
    (p / "c.bin").write_bytes(np.arange(64, dtype=np.uint16).tobytes())
    (p / "c.idx").write_bytes(b"MMIDIDX\x00\x00")
    return p / "c.bin"


def _jpg(p: Path) -> Path:
    from PIL import Image

    Image.new("RGB", (4, 4), (200, 10, 10)).save(p / "a.jpg")
    return p / "a.jpg"


def _png(p: Path) -> Path:
    from PIL import Image

    Image.new("RGB", (4, 4), (200, 10, 10)).save(p / "a.png")
    return p / "a.png"


def _h5(p: Path) -> Path:
    import h5py

    with h5py.File(p / "a.h5", "w") as f:
        f["x"] = np.arange(4)
    return p / "a.h5"


def _tfrecord(p: Path) -> Path:
    from headrace.formats._files import FILE_FORMATS

    (p / "a.tfrecord").write_bytes(FILE_FORMATS["tfrecord"].encoder({"x": np.arange(3)}))
    return p / "a.tfrecord"


def _mds(p: Path) -> Path:
    (p / "index.json").write_text(json.dumps({"version": 2, "shards": []}))
    return p


def _parquet_unnamed(p: Path) -> Path:
    # No extension: its first bytes (PAR1) say what it is.
    return _parquet(p).rename(p / "export")


@pytest.mark.parametrize(
    ("make", "fmt"),
    [
        (_parquet, "table"),
        (_arrow, "table"),
        (_npy, "npy"),
        (_npz, "npz"),
        (_tar, "tar"),
        (_megatron, "tokens"),
        (_jpg, "jpeg"),
        (_png, "png"),
        (_h5, "hdf5"),
        (_tfrecord, "tfrecord"),
        (_mds, "mds"),
        (_parquet_unnamed, "table"),
    ],
)
def test_check_without_format_names_the_flag_the_data_needs(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make: Callable[[Path], Path],
    fmt: str,
) -> None:
    # Before: argparse's bare "the following arguments are required: --format".
    data = make(tmp_path)
    assert main(["check", str(data)]) == 2
    err = capsys.readouterr().err
    assert f"--format {fmt}" in err, err
    assert str(data) in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_check_without_format_on_an_unknown_file_lists_the_formats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "mystery.dat"
    data.write_bytes(b"\x00\x01\x02 nothing known")
    assert main(["check", str(data)]) == 2
    err = capsys.readouterr().err
    assert "--format" in err and "npz" in err and "table" in err, err
    assert "Traceback" not in err
