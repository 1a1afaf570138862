"""``headrace check`` on files of many samples and on tables (session 52): HDF5 files of
samples written as science codes write them (gzip chunks, a damaged chunk mid-file), read
with each file one sample (the default) or each row one; and a table's problems numbered
by the dataset's row, as file and token sources' are, not by the check's shuffle."""

from __future__ import annotations

import io
import json
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from _mds_files import write_mds
from headrace.cli import main
from headrace.formats import MDSSource, TableSource
from headrace.pipeline import check

SHAPE = (8, 8, 3)
FILES, ROWS = 3, 24  # samples (rows of the first axis) a file


def _science(root: Path) -> Path:
    """``FILES`` HDF5 files of ``ROWS`` samples each (inputs and targets, gzip + shuffle,
    chunks of 4 samples), a byte of file 1's chunk of samples [12, 16) flipped."""
    root.mkdir()
    for i in range(FILES):
        x = np.random.default_rng(i).normal(0, 1, (ROWS, *SHAPE)).astype(np.float32)
        with h5py.File(root / f"run{i}.h5", "w") as f:
            gzip = {"compression": "gzip", "compression_opts": 4, "shuffle": True}
            f.create_dataset("inputs", data=x, chunks=(4, *SHAPE), **gzip)
            f.create_dataset("targets", data=x[..., 0], chunks=(4, *SHAPE[:2]), **gzip)
    with h5py.File(root / "run1.h5") as f:
        info = f["inputs"].id.get_chunk_info_by_coord((12, 0, 0, 0))
    data = bytearray((root / "run1.h5").read_bytes())
    data[info.byte_offset + info.size // 2] ^= 0x10
    (root / "run1.h5").write_bytes(bytes(data))
    return root


def test_hdf5_samples_per_file_header_checks_each_sample_and_finds_the_chunk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _science(tmp_path / "d")
    out = tmp_path / "r.json"
    args = ["check", str(root), "--format", "hdf5", "--datasets", "inputs,targets"]
    assert main([*args, "--samples-per-file", "header", "--json", str(out)]) == 1
    report = json.loads(out.read_text())
    assert report["samples"] == FILES * ROWS
    # File 1's rows 12-15, in file order: 24 + 12 ...
    assert [p["sample"] for p in report["problems"]] == [36, 37, 38, 39]
    assert all("run1.h5" in p["message"] for p in report["problems"])
    assert "each file was read as one sample" not in capsys.readouterr().out


def test_hdf5_of_many_samples_read_a_file_a_sample_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Without --samples-per-file each file is one sample (its whole datasets): every byte
    # is read and the damage found, but "3 samples read" over 72 was all the report said,
    # and "sample 1" named a file.
    root = _science(tmp_path / "d")
    args = ["check", str(root), "--format", "hdf5", "--datasets", "inputs,targets"]
    assert main(args) == 1
    said = capsys.readouterr().out
    assert "3 samples read" in said and "FileSource sample 1: FormatError" in said
    assert "each file was read as one sample (--samples-per-file 1, the default)" in said
    assert "'inputs' (24, 8, 8, 3) float32" in said
    assert "give --samples-per-file header" in said


def test_npy_of_one_sample_a_file_with_the_flag_given_says_nothing_more(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "d").mkdir()
    for i in range(3):
        np.save(tmp_path / "d" / f"{i}.npy", np.zeros((4, 4), np.float32))
    args = ["check", str(tmp_path / "d"), "--format", "npy", "--samples-per-file", "1"]
    assert main(args) == 0
    assert "each file was read" not in capsys.readouterr().out


def _tokens(root: Path) -> Path:
    """Two Parquet files of 300 rows of token ids (row groups of 50), an id past the
    vocabulary in part-0's row 123 and part-1's row 5 (the table's row 305), and part-1's
    row 40 (the table's 340) longer than 20 ids."""
    root.mkdir()
    rng = np.random.default_rng(0)
    for f in range(2):
        rows = [rng.integers(0, 1000, int(rng.integers(5, 20))).tolist() for _ in range(300)]
        if f == 0:
            rows[123][2] = 70_000
        else:
            rows[5][0] = 99_999
            rows[40] = list(range(25))
        table = pa.table({"input_ids": pa.array(rows, pa.list_(pa.int32()))})
        pq.write_table(table, root / f"part-{f}.parquet", row_group_size=50)
    return root


@pytest.mark.parametrize("shuffle", ["full", "window"])
def test_a_tables_problems_are_numbered_by_its_rows(tmp_path: Path, shuffle: str) -> None:
    # They were numbered in the check's shuffle: row 123 was "sample 30" or so, the
    # message's "(sample N)" too, while file and token sources name the dataset's order.
    windows = {"window_rows": 100} if shuffle == "window" else {}
    src = TableSource(
        _tokens(tmp_path / "t"), columns=["input_ids"], width=20, vocab_size=50_257,
        shuffle=shuffle, **windows,
    )  # fmt: skip
    report = check(src, batch_size=16)
    src.close()
    assert [p.sample for p in report.problems] == [123, 305, 340], str(report)
    first, second, long = report.problems
    assert "row 123 (row 123 of the table, sample 123)" in first.message
    assert "row 5 (row 305 of the table, sample 305)" in second.message
    assert "row 40 (row 340 of the table, sample 340)" in long.message  # its file's row
    assert first.error == "FormatError"


def test_a_tables_problems_in_the_json_report_are_its_rows(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = ["check", str(_tokens(tmp_path / "t")), "--format", "table", "--columns", "input_ids"]
    args += ["--width", "32", "--vocab-size", "50257", "--batch-size", "16", "--json", str(out)]
    assert main(args) == 1
    problems = json.loads(out.read_text())["problems"]
    assert [p["sample"] for p in problems] == [123, 305]
    assert "sample 305)" in problems[1]["message"]


def test_mds_problems_are_numbered_by_the_datasets_rows(tmp_path: Path) -> None:
    # MDS shards' rows likewise: sample 17's broken JPEG was "sample 23" (seed 0's shuffle).
    def jpeg(i: int) -> bytes:
        out = io.BytesIO()
        Image.fromarray(np.full((8, 8, 3), i, np.uint8)).save(out, "JPEG")
        return out.getvalue()

    samples: list[dict[str, object]] = [{"image": jpeg(i), "label": i} for i in range(60)]
    samples[17]["image"] = b"\xff\xd8not a jpeg"
    write_mds(tmp_path / "m", {"image": "jpeg", "label": "int"}, samples)
    src = MDSSource(str(tmp_path / "m"))
    report = check(src, batch_size=8)
    src.close()
    assert [p.sample for p in report.problems] == [17], str(report)
    assert "shard.00001.mds: sample 7" in report.problems[0].message
