"""Row files at their edges (round 47): a raw file's ``width=`` and ``in_flight=`` given
as NumPy integers, a bad ``width=`` named as the argument it is, and ``write_row_file``
to a ``file://`` URL, an object URL or a missing folder."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError, FormatError, StorageError
from headrace.formats import PaddedRows, PairRows, open_row_file, write_row_file


def _raw(tmp_path: Path, side: dict | None = None) -> Path:
    path = tmp_path / "r.bin"
    np.arange(1, 36, dtype=np.uint16).reshape(5, 7).tofile(path)
    if side is not None:
        (tmp_path / "r.bin.json").write_text(json.dumps(side))
    return path


@pytest.mark.parametrize("side", [None, {"dtype": "uint16", "width": 7}])
def test_a_raw_files_width_may_be_a_numpy_integer(tmp_path: Path, side: dict | None) -> None:
    # Refused before as "r.bin.json: width must be a positive integer (got np.int64(7))",
    # naming a sidecar that need not exist for a width that is one.
    path = _raw(tmp_path, side)
    rf = open_row_file(path, dtype="uint16", width=np.int64(7))
    assert rf.width == 7 and type(rf.width) is int
    assert json.dumps(rf.fingerprint())
    src = PaddedRows(rf, context=6, shuffle=False)
    np.testing.assert_array_equal(src.read(0, np.arange(2))["x"][1], np.arange(8, 14))


@pytest.mark.parametrize("width", [0, -3, True, 7.0, "7"])
def test_a_bad_width_argument_is_named_as_the_argument(tmp_path: Path, width: object) -> None:
    # It was named as the sidecar's ("r.bin.json: width must be ..."), a file not there.
    path = _raw(tmp_path)
    with pytest.raises(ConfigError, match=r"r\.bin: width= must be an integer >= 1 \(got "):
        open_row_file(path, dtype="uint16", width=width)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["padded", "pairs", "remote"])
def test_in_flight_may_be_a_numpy_integer(tmp_path: Path, kind: str) -> None:
    # Refused before, "in_flight must be an integer >= 1 (got np.int64(4))": it is one.
    tok = np.arange(1, 41, dtype=np.uint16).reshape(10, 4)
    path = tmp_path / "t.npy"
    np.save(path, tok)
    where = f"file://{path}" if kind == "remote" else path
    src: PaddedRows | PairRows
    if kind == "pairs":
        src = PairRows({"anchor": where}, in_flight=np.int64(4), shuffle=False)
        got = src.read(0, np.arange(3))["anchor_x"]
    else:
        src = PaddedRows(where, context=3, in_flight=np.int64(4), shuffle=False)
        got = src.read(0, np.arange(3))["x"]
    np.testing.assert_array_equal(got, tok[:3, :3] if kind != "pairs" else tok[:3])
    with pytest.raises(ConfigError, match=r"in_flight must be an integer >= 1 \(got True\)"):
        PaddedRows(where, context=3, in_flight=True)


def test_a_remote_tables_in_flight_may_be_a_numpy_integer(tmp_path: Path) -> None:
    # Passed its check, to be refused by the request queue as "max_in_flight must be ...".
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    from headrace.formats import Table

    pq.write_table(pa.table({"a": np.arange(6)}), tmp_path / "t.parquet")
    with Table.open(f"file://{tmp_path / 't.parquet'}", in_flight=np.int64(3)) as table:
        assert len(table) == 6


@pytest.mark.parametrize("name", ["r.npy", "r.bin"])
def test_write_row_file_to_a_file_url_writes_the_file_it_names(tmp_path: Path, name: str) -> None:
    # It opened "file:///.../r.npy.123.tmp" as a local path: FileNotFoundError.
    rows = np.arange(12, dtype=np.int16).reshape(3, 4)
    url = (tmp_path / name).as_uri()
    rf = write_row_file(url, rows)
    assert rf.path == url and (rf.rows, rf.width) == (3, 4)
    got = open_row_file(tmp_path / name)
    assert (got.rows, got.width, got.dtype) == (3, 4, np.int16)
    src = PaddedRows(url, context=3, shuffle=False, pad_id=-1)
    np.testing.assert_array_equal(src.read(0, np.arange(3))["x"], rows[:, :3])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [name] + ([] if name.endswith(".npy") else [f"{name}.json"])
    )


def test_write_row_file_to_an_object_url_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    # FileNotFoundError: "s3://bucket/r.npy.123.tmp", a file nobody named.
    with pytest.raises(ConfigError, match=r"s3://bucket/r\.bin: write_row_file writes local"):
        write_row_file("s3://bucket/r.bin", np.ones((2, 2), np.uint8))


def test_write_row_file_into_a_missing_folder_names_the_file(tmp_path: Path) -> None:
    # FileNotFoundError named "no/r.npy.123.tmp", a temporary name, not the file asked for.
    path = tmp_path / "no" / "r.npy"
    with pytest.raises(StorageError, match=rf"{re.escape(str(path))}: cannot write the row file"):
        write_row_file(path, np.ones((2, 2), np.uint8))
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("keep", [0, 3])
@pytest.mark.parametrize("remote", [False, True])
def test_an_npy_cut_inside_its_magic_is_named_truncated(
    tmp_path: Path, keep: int, remote: bool
) -> None:
    # "not an NPY file: starts with b''": it is one, cut short (a partial copy).
    path = tmp_path / "r.npy"
    np.save(path, np.ones((2, 2), np.uint8))
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(FormatError, match=rf"r\.npy: truncated: {keep} bytes, shorter than"):
        open_row_file(path.as_uri() if remote else path)
