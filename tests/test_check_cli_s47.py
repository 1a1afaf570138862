"""``headrace check --json`` (s47): damage found as the dataset is opened is reported in
the JSON file too, not on stderr alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from headrace.cli import main


def test_damage_found_at_open_is_written_to_the_json_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A token file cut mid-token: refused as it is opened, exit 2, and the --json file
    # was never written (a script then read a stale one, or none).
    path = tmp_path / "t.bin"
    path.write_bytes(np.arange(1000, dtype=np.uint16).tobytes() + b"x")
    out = tmp_path / "r.json"
    out.write_text('{"stale": true}')
    args = ["check", str(path), "--format", "tokens", "--dtype", "uint16", "--context", "16"]
    assert main([*args, "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert "file size 2001 is not a multiple of the uint16 item size 2" in err
    report = json.loads(out.read_text())
    assert report["samples"] == 0 and report["complete"] is False
    (problem,) = report["problems"]
    assert problem["source"] == "TokenSource" and problem["sample"] is None
    assert problem["error"] == "DataError"
    assert f"{path}: file size 2001 is not a multiple" in problem["message"]


def test_a_missing_dataset_is_written_to_the_json_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    missing = tmp_path / "none"
    assert main(["check", str(missing), "--format", "npz", "--json", str(out)]) == 2
    assert "none" in capsys.readouterr().err
    (problem,) = json.loads(out.read_text())["problems"]
    assert problem["source"] == "FileSource" and problem["error"] == "ObjectNotFoundError"


def test_a_bad_flag_writes_no_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A command line refused is no finding about the data: no report, as before.
    path = tmp_path / "t.bin"
    path.write_bytes(np.arange(1000, dtype=np.uint16).tobytes())
    out = tmp_path / "r.json"
    args = ["check", str(path), "--format", "tokens", "--dtype", "uint16", "--split", "x"]
    assert main([*args, "--json", str(out)]) == 2
    assert "--split is for --format mds" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("fmt", "flags", "said"),
    [
        # A token file has no members or per-file counts: both were dropped without a word.
        ("tokens", ["--datasets", "x"], "--datasets is for file formats"),
        ("tokens", ["--samples-per-file", "4"], "--samples-per-file is for file formats"),
        # A window's tokens mean nothing to a file dataset or a table: dropped too.
        ("npz", ["--context", "64"], "--context is for --format tokens"),
        ("table", ["--context", "64"], "--context is for --format tokens"),
        ("mds", ["--context", "64"], "--context is for --format tokens"),
    ],
)
def test_a_flag_the_format_does_not_read_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, flags: list[str], said: str
) -> None:
    path = tmp_path / "t.bin"
    path.write_bytes(np.arange(1000, dtype=np.uint16).tobytes())
    extra = ["--dtype", "uint16"] if fmt == "tokens" else []
    assert main(["check", str(path), "--format", fmt, *extra, *flags]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err


def test_the_context_default_is_still_1024_for_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.bin"
    path.write_bytes(np.arange(4100, dtype=np.uint16).tobytes())
    assert main(["check", str(path), "--format", "tokens", "--dtype", "uint16"]) == 0
    assert "4 samples read" in capsys.readouterr().out  # (4100 - 1) // 1024 windows


def test_json_dash_writes_the_report_to_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `check DATA --json - | jq` wrote a file named '-' and piped the summary lines into
    # jq; `bench --json -` writes its report to stdout, the tables to stderr.
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "t.bin"
    path.write_bytes(np.arange(1000, dtype=np.uint16).tobytes())
    args = ["check", str(path), "--format", "tokens", "--dtype", "uint16", "--context", "16"]
    assert main([*args, "--json", "-"]) == 0
    printed = capsys.readouterr()
    assert json.loads(printed.out)["samples"] == 62
    assert "62 samples read" in printed.err
    assert not (tmp_path / "-").exists()
    # Damage found at open: its report on stdout too.
    path.write_bytes(path.read_bytes() + b"x")
    assert main([*args, "--json", "-"]) == 2
    printed = capsys.readouterr()
    assert json.loads(printed.out)["problems"][0]["error"] == "DataError"
    assert not (tmp_path / "-").exists()


def test_an_empty_json_path_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `--json "$OUT"` with OUT unset checked the dataset and wrote no report, exit 0.
    path = tmp_path / "t.bin"
    path.write_bytes(np.arange(1000, dtype=np.uint16).tobytes())
    args = ["check", str(path), "--format", "tokens", "--dtype", "uint16", "--context", "16"]
    assert main([*args, "--json", ""]) == 2
    assert "--json '' is empty" in capsys.readouterr().err
