"""``headrace check --json`` (s49): every table file and token file that fails to open is
a problem of the report, as a FileSource's failed headers are, not the first alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from headrace.cli import main


def _problems(tmp_path: Path, argv: list[str]) -> list[dict[str, object]]:
    out = tmp_path / "r.json"
    assert main(["check", *argv, "--json", str(out)]) == 2
    report = json.loads(out.read_text())
    assert report["complete"] is False and report["samples"] == 0
    problems: list[dict[str, object]] = report["problems"]
    assert all(p["sample"] is None for p in problems)
    return problems


def _named(problems: list[dict[str, object]]) -> list[str]:
    return [str(p["message"]).split(": ")[0] for p in problems]


@pytest.mark.parametrize("ext", ["parquet", "arrow"])
def test_each_table_file_that_fails_to_open_is_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ext: str
) -> None:
    # 3 of 5 files damaged (cut short: no footer): the terminal named the other two,
    # but the report listed the first file alone.
    data = tmp_path / "t"
    data.mkdir()
    table = pa.table({"x": np.arange(100, dtype=np.int64), "y": np.ones(100, np.float32)})
    for i in range(5):
        path = data / f"p{i}.{ext}"
        if ext == "parquet":
            pq.write_table(table, path)
        else:
            feather.write_feather(table, path, compression="uncompressed")
        if i in (0, 2, 3):
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    problems = _problems(tmp_path, [str(data), "--format", "table"])
    assert "2 other files of the table failed to open too" in capsys.readouterr().err
    assert _named(problems) == [str(data / f"p{i}.{ext}") for i in (0, 2, 3)]
    assert {p["source"] for p in problems} == {"TableSource"}
    assert {p["error"] for p in problems} == {"FormatError"}


def _llmc(path: Path, tokens: int, cut: bool) -> None:
    head = np.zeros(256, np.int32)
    head[:3] = 20240520, 1, tokens
    body = np.arange(tokens, dtype=np.uint16)
    path.write_bytes(head.tobytes() + (body[:10] if cut else body).tobytes())


def test_each_token_file_that_fails_to_open_is_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "tok"
    data.mkdir()
    for i in range(5):
        _llmc(data / f"s{i}.bin", 1000, cut=i in (1, 2, 4))
    problems = _problems(tmp_path, [str(data), "--format", "tokens", "--context", "8"])
    assert "2 other files failed to open too" in capsys.readouterr().err
    assert _named(problems) == [str(data / f"s{i}.bin") for i in (1, 2, 4)]
    assert {p["source"] for p in problems} == {"TokenSource"}
    assert {p["error"] for p in problems} == {"DataError"}
    assert all("truncated" in str(p["message"]) for p in problems)


def test_most_bounds_the_token_files_listed(tmp_path: Path) -> None:
    data = tmp_path / "tok"
    data.mkdir()
    for i in range(4):
        _llmc(data / f"s{i}.bin", 100, cut=True)
    argv = [str(data), "--format", "tokens", "--context", "8", "--most", "2"]
    assert _named(_problems(tmp_path, argv)) == [str(data / "s0.bin"), str(data / "s1.bin")]


def test_a_wrong_dtype_is_the_arguments_error_not_each_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A ConfigError is the arguments', not a file's: raised at once, not once per file.
    data = tmp_path / "tok"
    data.mkdir()
    for i in range(3):
        _llmc(data / f"s{i}.bin", 100, cut=False)
    out = tmp_path / "r.json"
    argv = ["check", str(data), "--format", "tokens", "--dtype", "uint32", "--json", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "dtype uint32 given" in err and "other files" not in err
