"""``headrace check`` (s49): every file that fails as the dataset is opened is listed,
bounded on the terminal, whole in the ``--json`` report."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from headrace.cli import main


def test_every_unreadable_header_is_a_problem_of_the_json_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 12 of 30 NPY files with a damaged header: the terminal named the first, then "11
    # others" and 8 of their names (kept: bounded), but the report listed the first
    # file alone, so a script never saw the other 11.
    data = tmp_path / "d"
    data.mkdir()
    bad = [f"a{i:02d}.npy" for i in range(0, 30, 5)] + [f"a{i:02d}.npy" for i in range(1, 30, 5)]
    for i in range(30):
        np.save(data / f"a{i:02d}.npy", np.arange(12, dtype=np.float32).reshape(3, 4))
    for name in bad:
        (data / name).write_bytes(b"\x93NUMPY not a header")
    out = tmp_path / "r.json"
    argv = ["check", str(data), "--format", "npy", "--samples-per-file", "header"]
    assert main([*argv, "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the headers of 11 other files failed too: " in err and " and 3 more" in err
    report = json.loads(out.read_text())
    assert report["complete"] is False and report["samples"] == 0
    problems = report["problems"]
    named = [p["message"].split(":")[0] for p in problems]
    assert named == [str(data / n) for n in sorted(bad)]
    assert {p["error"] for p in problems} == {"FormatError"}
    assert {p["source"] for p in problems} == {"FileSource"} and not any(
        p["sample"] is not None for p in problems
    )


def test_hdf5_files_without_the_dataset_are_each_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "d"
    data.mkdir()
    for i in range(4):
        with h5py.File(data / f"v{i}.h5", "w") as f:
            f.create_dataset("x" if i % 2 else "y", data=np.zeros((2, 3), np.float32))
    out = tmp_path / "r.json"
    argv = ["check", str(data), "--format", "hdf5", "--samples-per-file", "header"]
    assert main([*argv, "--datasets", "x", "--json", str(out)]) == 2
    assert "the headers of 1 other file failed too: " in capsys.readouterr().err
    problems = json.loads(out.read_text())["problems"]
    assert [p["message"].split(":")[0] for p in problems] == [
        str(data / "v0.h5"),
        str(data / "v2.h5"),
    ]


def test_most_bounds_the_files_listed(tmp_path: Path) -> None:
    data = tmp_path / "d"
    data.mkdir()
    for i in range(6):
        (data / f"a{i}.npy").write_bytes(b"\x93NUMPY not a header")
    out = tmp_path / "r.json"
    argv = ["check", str(data), "--format", "npy", "--samples-per-file", "header"]
    assert main([*argv, "--most", "2", "--json", str(out)]) == 2
    problems = json.loads(out.read_text())["problems"]
    assert [p["message"].split(":")[0] for p in problems] == [
        str(data / "a0.npy"),
        str(data / "a1.npy"),
    ]
    assert "the headers of 5 other files failed too" in problems[0]["message"]
