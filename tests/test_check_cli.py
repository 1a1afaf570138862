"""``headrace check``: a dataset read once from the command line, every bad sample listed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from _mds_files import write_two_bad_dtypes
from headrace.cli import _Terminated, main
from headrace.formats import synthetic_arrays, write_sample_file


def npz_files(root: Path, n: int, bad: tuple[int, ...] = ()) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        path = root / f"s{i:02d}.npz"
        arrays = synthetic_arrays("npz", seed=i, shape=(4, 3), samples_per_file=2)
        write_sample_file("npz", path, arrays)
        if i in bad:
            path.write_bytes(path.read_bytes()[:16] + b"\xff\x00junk" * 40)
    return root


def test_bad_files_are_listed_with_exit_1_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = npz_files(tmp_path / "d", 6, bad=(1, 4))
    out = tmp_path / "r.json"
    args = ["check", str(root), "--format", "npz", "--samples-per-file", "2", "--batch-size", "4"]
    rc = main([*args, "--json", str(out)])
    printed = capsys.readouterr()
    assert rc == 1
    assert "4 failed" in printed.out and "s01.npz" in printed.out and "s04.npz" in printed.out
    assert "checked 12 of 12 samples (100%)\n" in printed.err
    # stderr is no terminal here (a job's log): whole lines, at most one each 10%.
    progress = [ln for ln in printed.err.splitlines() if ln.startswith("checked ")]
    assert "\r" not in printed.err and 1 <= len(progress) <= 11
    report = json.loads(out.read_text())
    # Files are shuffled (the default): which samples they hold depends on the seed, not
    # which files are named and how many samples fail (two each).
    names = {p["message"].split(":")[0].rsplit("/", 1)[-1] for p in report["problems"]}
    assert names == {"s01.npz", "s04.npz"} and len(report["problems"]) == 4
    assert report["samples"] == 12 and report["complete"] is True and report["shard"] == "0/1"
    # Two machines, each its share: together the same four problems, 12 samples.
    got = []
    for i in range(2):
        assert main([*args, "--shard", f"{i}/2", "--json", str(out)]) == 1
        got.append(json.loads(out.read_text()))
    assert sum(r["samples"] for r in got) == 12
    assert sorted(p["sample"] for r in got for p in r["problems"]) == sorted(
        p["sample"] for p in report["problems"]
    )
    assert {p["error"] for p in report["problems"]} == {"FormatError"}


def test_hidden_files_left_out_are_counted_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Checked, a folder copied from a Mac failed on every ._x.npz (not a zip) and named
    # each as damaged: the data was fine (fails before: exit 1, 3 failed).
    root = npz_files(tmp_path / "d", 3)
    for f in list(root.iterdir()):
        (root / f"._{f.name}").write_bytes(b"\x00\x05\x16\x07" + bytes(200))
    out = tmp_path / "r.json"
    assert main(["check", str(root), "--format", "npz", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "no problems" in printed
    assert "skipped 3 hidden file(s) or folder(s)" in printed and "'._s00.npz'" in printed
    assert json.loads(out.read_text())["hidden_skipped"] == 3


def test_fifos_left_out_are_counted_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A FIFO named like a sample was left out of the check without a word (fails
    # before: no line, no "special_skipped").
    root = npz_files(tmp_path / "d", 2)
    os.mkfifo(root / "s99.npz")
    out = tmp_path / "r.json"
    assert main(["check", str(root), "--format", "npz", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "skipped 1 file(s) that are not regular files (e.g. 's99.npz': a FIFO)" in printed
    assert json.loads(out.read_text())["special_skipped"] == 1


def test_format_aliases_are_taken_as_filesource_takes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --format jpg was "invalid choice" though FileSource(format="jpg") reads JPEGs
    # (fails before: SystemExit 2).
    from headrace.formats import write_sample_file

    root = tmp_path / "photos"
    root.mkdir()
    for n in ("a.JPG", "b.jfif"):
        write_sample_file("jpeg", root / n, np.full((4, 5, 3), 7, np.uint8))
    assert main(["check", str(root), "--format", "jpg"]) == 0
    assert "2 samples read" in capsys.readouterr().out


def test_labels_from_folders_count_each_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "train"
    for c, n in (("zebra", 3), ("ant", 1), ("cat", 2)):
        (root / c).mkdir(parents=True)
        for i in range(n):
            write_sample_file("npy", root / c / f"{i}.npy", {"data": np.zeros((2, 3), np.uint8)})
    out = tmp_path / "r.json"
    args = ["check", str(root), "--format", "npy", "--samples-per-file", "2", "--labels", "folders"]
    assert main([*args, "--json", str(out)]) == 0
    assert "3 classes, samples of each: ant 2, cat 4, zebra 6" in capsys.readouterr().out
    assert json.loads(out.read_text())["classes"] == {"ant": 2, "cat": 4, "zebra": 6}


def test_labels_from_a_csv_count_each_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = npz_files(tmp_path / "val", 3)  # flat: s00.npz, s01.npz, s02.npz
    table = tmp_path / "val.csv"
    # A header row (a file no source lists), a file not here, extra columns.
    table.write_text("file,class\ns00.npz,eel\ns01.npz,ant,x\ns02.npz,eel\ns99.npz,cod\n")
    args = ["check", str(root), "--format", "npz", "--labels", str(table)]
    assert main(args) == 0
    assert "2 classes, samples of each: ant 1, eel 2" in capsys.readouterr().out
    table.write_text("s00.npz,eel\ns01.npz,ant\ns02.npz,eel\n", encoding="utf-8-sig")
    assert main(args) == 0  # no header: the first file's name after Excel's BOM
    assert "2 classes, samples of each: ant 1, eel 2" in capsys.readouterr().out
    for text, says in (
        ("s00.npz,eel\ns01.npz\n", "line 2 has no class (['s01.npz'])"),
        ("s00.npz,eel\ns00.npz,ant\n", "line 2 gives 's00.npz' the class 'ant', an earlier"),
        ("s00.npz,eel\n", "classes of 1 of its 3 files, not 's01.npz' (2 in all)"),
    ):
        table.write_text(text)
        assert main(args) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err, err
    assert main([*args[:-1], str(tmp_path / "none.csv")]) == 2
    assert "none.csv: No such file or directory (give 'folders' or a CSV" in capsys.readouterr().err
    table.write_bytes(b"s00.npz,\xff\xfe\n")  # a spreadsheet's own format, say
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "val.csv: not a UTF-8 CSV ('utf-8' codec can't decode" in err and "Traceback" not in err


def test_a_raw_token_file_without_a_dtype_is_told_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The message said "pass ... dtype='uint16'": the Python argument, not the flag
    # (fails before: no "--dtype" in it).
    path = tmp_path / "tokens.bin"
    np.full(4000, 5, dtype=np.uint32).tofile(path)
    assert main(["check", str(path), "--format", "tokens", "--context", "64"]) == 2
    err = capsys.readouterr().err
    assert "raw token file needs a dtype" in err
    assert "on the command line: give it with --dtype uint16, --dtype uint32" in err


def test_a_clean_token_file_exits_0_and_ids_past_the_vocabulary_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "val.bin"
    tokens = np.full(4000, 5, dtype=np.uint16)
    tokens.tofile(path)
    args = ["check", str(path), "--format", "tokens", "--dtype", "uint16", "--context", "64"]
    assert main([*args, "--vocab-size", "6"]) == 0
    out = capsys.readouterr().out  # (4000 - 1) // 64 windows, all ids < 6
    assert "62 samples read" in out and "no problems" in out
    tokens[1000] = 6
    tokens.tofile(path)
    assert main([*args, "--vocab-size", "6"]) == 1
    assert "1 failed" in capsys.readouterr().out


def test_headers_that_fail_are_all_named_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # samples_per_file="header" reads every count before planning: a corrupt file fails
    # there, and the error names it and every other file whose header failed.
    root = npz_files(tmp_path / "d", 6, bad=(1, 3, 4))
    assert main(["check", str(root), "--format", "npz", "--samples-per-file", "header"]) == 2
    err = capsys.readouterr().err
    assert "s01.npz: truncated or corrupt NPZ" in err
    assert "; the headers of 2 other files failed too: " in err
    assert "s03.npz" in err and "s04.npz" in err and "\n" not in err.rstrip("\n")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--format", "jpeg", "--vocab-size", "5"], "--vocab-size is for --format tokens"),
        (["--format", "npz", "--samples-per-file", "many"], "must be an integer or 'header'"),
        (["--format", "npz", "--store-option", "endpoint"], "give it as KEY=VALUE"),
        (["--format", "npz", "--store-option", "path_style=maybe"], "give true or false"),
        (["--format", "npz", "--shard", "1"], "--shard '1': give it as I/K"),
        # Named by their flags: check() and the sources named their Python arguments
        # (fails before: "check's shard must be (i, k) with 0 <= i < k (got (4, 4))",
        # "check needs batch_size >= 1 and most >= 1 (got 0, 100)", ...).
        (["--format", "npz", "--shard", "4/4"], "--shard 4/4: I must be below K"),
        (["--format", "npz", "--batch-size", "0"], "--batch-size 0: expected a whole number"),
        (["--format", "npz", "--most", "0"], "--most 0: expected a whole number >= 1"),
        (["--format", "npz", "--samples-per-file", "0"], "--samples-per-file 0: expected"),
        (["--format", "tokens", "--context", "0"], "--context 0: expected a whole number"),
        (["--format", "tokens", "--vocab-size", "0"], "--vocab-size 0: expected a whole"),
        (["--format", "hdf5"], "on the command line: name them with --datasets, e.g."),
        (["--format", "tokens", "--labels", "folders"], "--labels is for file formats"),
        # npz_files writes its files straight into the folder: no class folder
        (["--format", "npz", "--labels", "folders"], "files are directly in"),
    ],
)
def test_argument_errors_are_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], expected: str
) -> None:
    root = npz_files(tmp_path / "d", 1)
    assert main(["check", str(root), *extra]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err


@pytest.mark.parametrize("stop", [KeyboardInterrupt, _Terminated(143)])
def test_an_interrupted_check_still_tells_what_it_found(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    stop: BaseException | type[BaseException],
) -> None:
    # Ctrl-C (or SIGTERM, which the CLI raises as a SystemExit) at 2/3 of a check printed
    # only 'interrupted': a bad file found at 2% of an hour's check was lost.
    import headrace._check_cli as cc

    def progress() -> object:
        def show(done: int, total: int) -> None:
            if done >= 8:  # fault injection: the interrupt, after two steps of three
                raise stop

        return show

    monkeypatch.setattr(cc, "_progress", progress)
    root = npz_files(tmp_path / "d", 6, bad=(0, 1, 2, 3, 4, 5))
    out = tmp_path / "r.json"
    args = ["check", str(root), "--format", "npz", "--samples-per-file", "2", "--batch-size", "4"]
    rc = main([*args, "--json", str(out)])
    assert rc == (130 if stop is KeyboardInterrupt else 143)
    assert "8 samples read" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["interrupted"] is True and report["complete"] is False
    assert report["samples"] == 8 and len(report["problems"]) == 8


@pytest.mark.parametrize("where", ["missing/r.json", "."])
def test_an_unwritable_json_path_is_refused_before_the_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    # The path was tried only after the whole check (hours on a large bucket): exit 2,
    # no report, the problems found printed but not kept (fails before: 'checked 2 of 2
    # samples' then 'cannot write it (No such file or directory)').
    root = npz_files(tmp_path / "d", 2, bad=(1,))
    out = tmp_path / where
    assert main(["check", str(root), "--format", "npz", "--json", str(out)]) == 2
    printed = capsys.readouterr()
    assert "checked" not in printed.err and printed.out == ""
    assert f"--json {str(out)!r}" in printed.err
    assert ("does not exist; create it first" if where != "." else "is a folder") in printed.err


def test_datasets_with_a_space_after_the_comma_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --datasets "x, y" asked for a dataset named " y" (fails before: exit 2, not found).
    root = tmp_path / "h"
    root.mkdir()
    for i in range(2):
        arrays = synthetic_arrays("hdf5", seed=i, shape=(4,), samples_per_file=3)
        write_sample_file("hdf5", root / f"f{i}.h5", arrays)
    args = ["check", str(root), "--format", "hdf5", "--samples-per-file", "3"]
    assert main([*args, "--datasets", "x, y"]) == 0
    assert "6 samples read" in capsys.readouterr().out


def test_a_json_path_that_is_a_file_of_the_dataset_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `check photos --json photos/s01.npz` wrote the report over a file of the dataset
    # (fails before: exit 0, s01.npz replaced by JSON); a report beside them is fine.
    root = npz_files(tmp_path / "d", 3)
    victim = root / "s01.npz"
    before = victim.read_bytes()
    for data in (root, victim):
        assert main(["check", str(data), "--format", "npz", "--json", str(victim)]) == 2
        err = capsys.readouterr().err
        assert f"--json {str(victim)!r} is a file of the data read ({str(data)!r})" in err
    assert victim.read_bytes() == before
    report = root / "report.json"
    for _ in range(2):  # written, then written over: it is no file the check reads
        assert main(["check", str(root), "--format", "npz", "--json", str(report)]) == 0
    assert json.loads(report.read_text())["samples"] == 3


def test_several_token_files_a_directory_or_a_glob_are_one_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `headrace check shards/*.bin --format tokens` (the shell's expansion) failed with
    # "unrecognized arguments", and a directory or a quoted glob was refused with advice
    # for Python (sorted(glob.glob(...))) that the command line cannot take.
    shards = tmp_path / "shards"
    shards.mkdir()
    for i in range(3):
        (np.arange(1000 + 100 * i, dtype=np.uint16) + i).tofile(shards / f"s{i}.bin")
    (shards / "s0.bin.json").write_text('{"dtype": "uint16"}')  # a sidecar: not a token file
    every = sorted(str(p) for p in shards.glob("*.bin"))
    samples = sum((1000 + 100 * i - 1) // 16 for i in range(3))
    flags = ["--format", "tokens", "--dtype", "uint16", "--context", "16"]
    for data in (every, [str(shards)], [str(shards / "*.bin")]):
        out = tmp_path / "r.json"
        assert main(["check", *data, *flags, "--json", str(out)]) == 0
        printed = capsys.readouterr().out
        assert f"{' '.join(data)}: {samples:,} samples read" in printed
        report = json.loads(out.read_text())
        assert report["samples"] == samples
        assert report["data"] == (data if len(data) > 1 else data[0])
    assert main(["check", str(tmp_path / "nothing"), *flags]) == 2  # no such file: as before
    (tmp_path / "empty").mkdir()
    assert main(["check", str(tmp_path / "empty"), *flags]) == 2
    assert "empty: a folder with no .bin token files right in it" in capsys.readouterr().err
    # Folders are TokenSource's to expand, so the command refuses one of two splits too.
    (tmp_path / "splits").mkdir()
    for split in ("train", "val"):
        np.arange(1000, dtype=np.uint16).tofile(tmp_path / "splits" / f"{split}.bin")
    assert main(["check", str(tmp_path / "splits"), *flags]) == 2
    assert "*train*.bin" in capsys.readouterr().err


def test_several_files_of_a_file_format_are_one_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = npz_files(tmp_path / "d", 4, bad=(2,))
    files = [str(root / f"s{i:02d}.npz") for i in (0, 2, 3)]
    args = ["--format", "npz", "--samples-per-file", "2", "--batch-size", "2"]
    assert main(["check", *files, *args]) == 1
    printed = capsys.readouterr().out
    assert "6 samples read" in printed and "s02.npz" in printed and "s01.npz" not in printed


def test_a_token_file_shorter_than_the_context_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The message named Python's tail=True, which the command has no flag for.
    path = tmp_path / "small.bin"
    np.arange(500, dtype=np.uint16).tofile(path)
    assert main(["check", str(path), "--format", "tokens", "--dtype", "uint16"]) == 2
    err = capsys.readouterr().err
    assert "500 tokens is shorter than one sample of context 1024" in err
    assert "on the command line: give a smaller --context (the default is 1024)" in err


def test_a_table_is_checked_and_an_id_past_the_vocabulary_is_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --format table did not exist: a tokenized Hugging Face dataset (Parquet, Arrow,
    # save_to_disk) could be checked only from Python.
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    rows = [rng.integers(0, 1000, int(rng.integers(5, 60))).tolist() for _ in range(300)]
    rows[123][3] = 5000
    table = pa.table({"input_ids": pa.array(rows, pa.list_(pa.int32())), "label": np.arange(300)})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=50)
    out = tmp_path / "r.json"
    args = ["check", str(path), "--format", "table", "--columns", "input_ids", "--width", "64"]
    assert main([*args, "--vocab-size", "1000", "--json", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "300 samples read" in printed and "1 failed" in printed
    (problem,) = json.loads(out.read_text())["problems"]
    assert problem["error"] == "FormatError"
    assert "column 'input_ids', row 123" in problem["message"]
    assert "token id 5000 is outside the vocabulary [0, 1000)" in problem["message"]
    assert main(args) == 0  # no vocabulary given: every row reads
    capsys.readouterr()
    # A list column without --width names the flag; --width beside a file format is refused.
    assert main(["check", str(path), "--format", "table"]) == 2
    assert "on the command line: give it with --width N" in capsys.readouterr().err
    assert main(["check", str(tmp_path), "--format", "npz", "--width", "3"]) == 2
    assert "--width is for --format table" in capsys.readouterr().err
    # A row longer than --width is a problem (each listed: s50), naming --truncate, which
    # cuts it.
    short = ["check", str(path), "--format", "table", "--columns", "input_ids", "--width", "20"]
    assert main(short) == 1
    printed = capsys.readouterr().out
    assert "more than width=20; pass truncate=True" in printed
    assert "on the command line: --truncate cuts them" in printed
    assert main([*short, "--truncate"]) == 0


def test_a_table_of_lists_of_lists_is_checked_with_a_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A feature extractor's output (lists of lists): --shape reads it as (B, 2, 3), and
    # each row of another shape is listed, not the row groups holding them.
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [np.full((2, 3), i, np.float32).tolist() for i in range(100)]
    rows[7] = rows[7][:1]
    rows[70][1] = [1.0]
    table = pa.table({"f": pa.array(rows, pa.list_(pa.list_(pa.float32())))})
    path = tmp_path / "f.parquet"
    pq.write_table(table, path, row_group_size=40)
    out = tmp_path / "r.json"
    args = ["check", str(path), "--format", "table", "--batch-size", "8"]
    assert main([*args, "--shape", "f=2x3", "--json", str(out)]) == 1
    problems = json.loads(out.read_text())["problems"]
    named = sorted(p["message"].split(": row ")[1].split()[0] for p in problems)
    assert named == ["7", "70"], problems
    capsys.readouterr()
    # Without it, the message names the flag; a malformed one is refused by name.
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "holds lists of lists" in err and "on the command line: give it with --shape" in err
    for bad in ("f", "f=2xthree", "=2x3"):
        assert main([*args, "--shape", bad]) == 2
        assert f"--shape {bad!r}: give it as NAME=D1xD2" in capsys.readouterr().err
    assert main(["check", str(tmp_path), "--format", "npz", "--shape", "f=2x3"]) == 2
    assert "--shape is for --format table" in capsys.readouterr().err


def test_an_npy_volume_of_another_shape_is_noted_with_exit_0_and_in_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One volume of another size among NPY files: "no problems" said nothing of it.
    root = tmp_path / "v"
    root.mkdir()
    for i in range(5):
        np.save(root / f"v{i}.npy", np.zeros((3, 3, 3 + (i == 2)), np.float32))
    out = tmp_path / "r.json"
    assert main(["check", str(root), "--format", "npy", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "no problems\n  note: 'data' has 2 shapes:" in printed and "v2.npy" in printed
    shapes = json.loads(out.read_text())["shapes"]["data"]
    assert sorted(n for n, _ in shapes.values()) == [1, 4]
    assert shapes["(3, 3, 4) float32"][1].endswith("v2.npy")


def test_tfrecord_shards_with_a_damaged_record_are_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A record's data CRC that does not match: the header walk (lengths) passes, and the
    # read of its shard names the file, record and offset.
    root = tmp_path / "d"
    root.mkdir()
    for i in range(3):
        arrays = synthetic_arrays("tfrecord", seed=i, shape=(4, 3), samples_per_file=5)
        write_sample_file("tfrecord", root / f"train-{i:05d}-of-00003", arrays)
    shard = root / "train-00001-of-00003"
    data = bytearray(shard.read_bytes())
    data[20] ^= 0xFF  # inside record 0's data
    shard.write_bytes(bytes(data))
    assert main(["check", str(root / "train-*"), "--format", "tfrecord"]) == 1
    out = capsys.readouterr().out
    assert "train-00001-of-00003: record 0 at offset 0: its data's CRC-32C" in out
    assert "1 failed" in out  # that record alone (its shard's 5 until 2026-12-07)


def test_one_file_is_checked_as_a_dataset_of_that_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `headrace check data/*.npz` where the glob matched one file (or one file named)
    # was refused with the Python API's fix: "pass ['.../s00.npz'] (a list) to read this
    # file alone", which the command line cannot give.
    root = npz_files(tmp_path / "d", 2, bad=(1,))
    args = ["--format", "npz", "--samples-per-file", "2"]
    assert main(["check", str(root / "s00.npz"), *args]) == 0
    printed = capsys.readouterr()
    assert "s00.npz: 2 samples read in" in printed.out and "no problems" in printed.out
    assert main(["check", str(root / "s01.npz"), *args]) == 1
    printed = capsys.readouterr()
    assert "2 failed" in printed.out and "(a list)" not in printed.err + printed.out
    # One sample is said so: "1 sample read", "checked 1 of 1 sample" (was "1 samples").
    assert main(["check", str(root / "s00.npz"), "--format", "npz", "--batch-size", "1"]) == 0
    printed = capsys.readouterr()
    assert "s00.npz: 1 sample read in" in printed.out
    assert "checked 1 of 1 sample (100%)\n" in printed.err
    assert "Traceback" not in printed.err


def test_a_missing_file_is_one_line_without_an_errno(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It printed "headrace check: [Errno 2] .../gone.npz: no such file": str() of an
    # OSError(errno, message); the number is for code (exc.errno), not the user.
    root = npz_files(tmp_path / "d", 1)
    gone = str(tmp_path / "gone.npz")
    assert main(["check", gone, str(root / "s00.npz"), "--format", "npz"]) == 2
    assert capsys.readouterr().err == f"headrace check: {gone}: no such file\n"


def test_quoted_patterns_are_read_as_one_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 'a/*.npy' 'b/*.npy' as the shell leaves them quoted: each pattern's files (fails
    # before: "a/*.npy: no such file; did you mean 'a/1.npy'?", exit 2).
    for d in "ab":
        (tmp_path / d).mkdir()
        for i in range(2):
            write_sample_file("npy", tmp_path / d / f"{i}.npy", {"data": np.zeros(3, np.uint8)})
    pats = [str(tmp_path / d / "*.npy") for d in "ab"]
    assert main(["check", *pats, "--format", "npy"]) == 0
    assert "4 samples read" in capsys.readouterr().out


def test_mds_shards_are_checked_by_split_and_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train = tmp_path / "mds" / "train"
    write_two_bad_dtypes(train)
    out = tmp_path / "r.json"
    args = ["check", str(tmp_path / "mds"), "--format", "mds", "--split", "train"]
    assert main([*args, "--json", str(out), "--batch-size", "4"]) == 1
    printed = capsys.readouterr().out
    assert "2 failed" in printed and "dtype byte 200 names no ndarray dtype" in printed
    report = json.loads(out.read_text())
    assert sorted(p["sample"] for p in report["problems"]) == [13, 18]
    assert report["samples"] == 20 and report["complete"] is True
    # Only the column given is read: the damaged one left out, nothing fails.
    assert main([*args, "--columns", "y"]) == 0
    assert "20 samples read" in capsys.readouterr().out
    # Without the split: the folder's splits named; flags of other formats refused.
    assert main(["check", str(tmp_path / "mds"), "--format", "mds"]) == 2
    assert "it holds the splits 'train': give split='train'" in capsys.readouterr().err
    for flag in (["--width", "8"], ["--samples-per-file", "2"], ["--dtype", "uint16"]):
        assert main([*args, *flag]) == 2
        assert "is not for --format mds" in capsys.readouterr().err
    assert main([*args, "--labels", "folders"]) == 2
    assert "--labels is for file formats" in capsys.readouterr().err
    assert main(["check", str(train), str(train), "--format", "mds"]) == 2
    assert "--format mds reads one dataset" in capsys.readouterr().err
    assert main(["check", str(train), "--format", "npz", "--split", "train"]) == 2
    assert "--split is for --format mds" in capsys.readouterr().err
