"""Damaged files in each format are refused naming the file, what is wrong, and what to
do (a partial copy or download is the usual cause): before 2026-12-03 these said what
was wrong and stopped."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from headrace.errors import FormatError
from headrace.formats import FileSource, TableSource, encode

_FIX = r"copy the file again \(a partial copy or download\?\) or leave it out"


def test_a_truncated_npy_says_to_copy_it_again(tmp_path: Path) -> None:
    np.save(tmp_path / "0.npy", np.arange(1000, dtype=np.float32).reshape(100, 10))
    data = (tmp_path / "0.npy").read_bytes()
    (tmp_path / "0.npy").write_bytes(data[:-100])
    with pytest.raises(FormatError, match=rf"0\.npy: truncated: header says 4000 .*: {_FIX}"):
        FileSource(tmp_path, format="npy").read(0, np.arange(1))


def test_an_npy_of_an_unknown_version_says_how_to_write_it_again(tmp_path: Path) -> None:
    # Before: "unsupported NPY version 9.0 (expected 1, 2 or 3)", and no way out.
    np.save(tmp_path / "0.npy", np.arange(12, dtype=np.int16))
    data = bytearray((tmp_path / "0.npy").read_bytes())
    data[6] = 9  # the major version byte
    (tmp_path / "0.npy").write_bytes(bytes(data))
    with pytest.raises(
        FormatError,
        match=rf"0\.npy: unsupported NPY version 9\.0 \(expected 1\.0, 2\.0 or 3\.0, .*"
        rf"save the array again with numpy\.save, or {_FIX}",
    ):
        FileSource(tmp_path, format="npy").read(0, np.arange(1))


def test_a_damaged_png_says_to_copy_it_again(tmp_path: Path) -> None:
    data = bytearray(encode("png", np.arange(64 * 64 * 3, dtype=np.uint8).reshape(64, 64, 3)))
    data[60] ^= 0x10  # inside the image data
    (tmp_path / "0.png").write_bytes(bytes(data))
    with pytest.raises(FormatError, match=rf"0\.png: corrupt or truncated PNG .*: {_FIX}"):
        FileSource(tmp_path, format="png").read(0, np.arange(1))


def test_a_cut_arrow_stream_says_to_copy_it_again(tmp_path: Path) -> None:
    t = pa.table({"x": np.arange(10_000)})
    path = tmp_path / "s.arrow"
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t, max_chunksize=1000)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match=rf"s\.arrow: truncated or corrupt Arrow IPC .*{_FIX}"):
        TableSource(path)


def test_a_save_to_disk_folder_missing_a_shard_says_to_save_it_again(tmp_path: Path) -> None:
    t = pa.table({"x": np.arange(10)})
    with pa.OSFile(str(tmp_path / "data-00000-of-00002.arrow"), "wb") as f:
        with pa.ipc.new_stream(f, t.schema) as w:
            w.write_table(t)
    files = [{"filename": f"data-0000{i}-of-00002.arrow"} for i in range(2)]
    (tmp_path / "state.json").write_text(json.dumps({"_data_files": files}))
    (tmp_path / "dataset_info.json").write_text("{}")
    with pytest.raises(
        FormatError,
        match=r"data-00001-of-00002\.arrow'\]: the folder is incomplete; copy it again, or "
        r"save it again with ds\.save_to_disk\(folder\)",
    ):
        TableSource(tmp_path)
