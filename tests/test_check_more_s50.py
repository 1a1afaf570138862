"""``headrace check`` (s50): every shard of a small dataset checks its share (a shard
with no step checked nothing and said "no problems"), every over-width row of a table
listed, lists of lists by ``--shape X=*x*``, and the indices-mapping message's fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from headrace.cli import main
from headrace.formats import synthetic_arrays, write_sample_file
from headrace.pipeline import check


def _npz(root: Path, n: int, bad: tuple[int, ...]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        path = root / f"s{i:02d}.npz"
        write_sample_file("npz", path, synthetic_arrays("npz", seed=i, shape=(4, 3)))
        if i in bad:
            path.write_bytes(path.read_bytes()[:16] + b"\xff\x00junk" * 40)
    return root


@pytest.mark.parametrize("k", [2, 3, 7])
def test_each_shard_of_a_dataset_of_one_step_checks_its_share(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], k: int
) -> None:
    # 20 samples are one step at the default --batch-size 64: shard 1/2 checked 0
    # samples and exited 0, "no problems" (fails before: samples 20 + 0).
    root = _npz(tmp_path / "d", 20, bad=(3, 17))
    out = tmp_path / "r.json"
    got = []
    for i in range(k):
        rc = main(
            ["check", str(root), "--format", "npz", "--shard", f"{i}/{k}", "--json", str(out)]
        )
        report = json.loads(out.read_text())
        assert rc == (1 if report["problems"] else 0)
        assert report["samples"] >= 1
        got.append(report)
        printed = capsys.readouterr().out
        assert f"shard {i}/{k}: {report['samples']} of 20 samples" in printed
    assert sum(r["samples"] for r in got) == 20
    names = sorted(
        p["message"].split(":")[0].rsplit("/", 1)[-1] for r in got for p in r["problems"]
    )
    assert names == ["s03.npz", "s17.npz"]


def test_a_shard_past_the_samples_says_it_checked_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 3 samples, 5 machines: shards 3/5 and 4/5 hold none. Exit 0 (the others read every
    # sample: a script's `|| fail` must not fail a sound dataset), said out loud.
    root = _npz(tmp_path / "d", 3, bad=())
    seen = 0
    for i in range(5):
        assert main(["check", str(root), "--format", "npz", "--shard", f"{i}/5"]) == 0
        printed = capsys.readouterr().out
        if i < 3:
            assert "1 sample read" in printed and "no problems" in printed
            seen += 1
        else:
            assert "no problems" not in printed
            assert "0 samples read" in printed and "nothing checked" in printed
            assert "shard 3/5: 0 of 3 samples" in printed.replace(f"{i}/5", "3/5")
    assert seen == 3


def test_python_check_splits_a_short_epoch_among_its_shards(tmp_path: Path) -> None:
    from headrace.formats import FileSource

    src = FileSource(str(_npz(tmp_path / "d", 20, bad=(5,))), format="npz", shuffle="none")
    parts = [check(src, shard=(i, 4)) for i in range(4)]
    assert [p.samples for p in parts] == [5, 5, 5, 5]
    assert [q.sample for p in parts for q in p.problems] == [5]
    src.close()


def _long_rows(path: Path, long: tuple[int, ...]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [list(range(30 if r in long else 10)) for r in range(300)]
    table = pa.table({"input_ids": pa.array(rows, pa.list_(pa.int32())), "y": np.arange(300)})
    pq.write_table(table, path, row_group_size=50)


def test_every_row_longer_than_width_is_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The first over-width row stopped the check (exit 2), naming that one row; the
    # others were found one run (and one fix) at a time. Fails before: exit 2.
    path = tmp_path / "t.parquet"
    _long_rows(path, (5, 77, 200, 201))
    out = tmp_path / "r.json"
    args = ["check", str(path), "--format", "table", "--columns", "input_ids", "--width", "20"]
    assert main([*args, "--json", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "300 samples read" in printed and "4 failed" in printed
    assert "on the command line: --truncate cuts them" in printed
    report = json.loads(out.read_text())
    assert report["complete"] is True and report["samples"] == 300
    rows = sorted(int(p["message"].split(" row ")[1].split(" ")[0]) for p in report["problems"])
    assert rows == [5, 77, 200, 201]
    assert all("has 30 items, more than width=20" in p["message"] for p in report["problems"])
    assert {p["error"] for p in report["problems"]} == {"ConfigError"}
    # --most stops there, as with other problems; --truncate reads them all.
    assert main([*args, "--most", "2", "--json", str(out)]) == 1
    report = json.loads(out.read_text())
    assert len(report["problems"]) == 2 and report["complete"] is False
    assert main([*args, "--truncate"]) == 0
    capsys.readouterr()
    # A setting no row can meet still stops the check: a list column without a width.
    assert main(["check", str(path), "--format", "table"]) == 2


def test_rows_of_lists_of_any_length_are_checked_with_nxn_and_a_width_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Rows of lists of lists of any length (TableSource's shapes=(None, None) and
    # widths=(lists, items)) had no spelling: --shape took N as a first dimension only,
    # --width one number (fails before: --shape 'w=NxN' refused).
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [[list(range(1 + (i + j) % 5)) for j in range(1 + i % 3)] for i in range(60)]
    rows[9] = [[1, 2]] * 6  # 6 lists: more than 4
    rows[41] = [list(range(12))]  # 12 items: more than 8
    table = pa.table({"w": pa.array(rows, pa.list_(pa.list_(pa.int32()))), "y": np.arange(60)})
    path = tmp_path / "w.parquet"
    pq.write_table(table, path, row_group_size=20)
    out = tmp_path / "r.json"
    args = ["check", str(path), "--format", "table", "--columns", "w", "--shape", "w=NxN"]
    assert main([*args, "--width", "w=4x8", "--json", str(out)]) == 1
    report = json.loads(out.read_text())
    assert report["samples"] == 60 and report["shapes"]["w"]["(4, 8) int32"][0] == 58
    named = sorted(int(p["message"].split(": row ")[1].split()[0]) for p in report["problems"])
    assert named == [9, 41]
    capsys.readouterr()
    assert main([*args, "--width", "w=6x12"]) == 0
    assert "60 samples read" in capsys.readouterr().out
    # Without the pair, the refusal names the flag; a malformed one is refused by name.
    assert main([*args, "--width", "8"]) == 2
    assert (
        "on the command line: give it with --width NAME=LxI (L lists of I items)"
        in capsys.readouterr().err
    )
    for bad in ("w=8x", "w=x8", "w=8x8x8", "=8", "w=0x8", "eight"):
        assert main([*args, "--width", bad]) == 2
        assert f"--width {bad!r}: give it as N" in capsys.readouterr().err


def test_the_indices_mapping_refusal_gives_a_fix_that_reads(tmp_path: Path) -> None:
    # It said "ds.flatten_indices() or ds.save_to_disk(folder) ...: pass that folder":
    # flatten_indices() returns a Dataset, no folder. Each fix it names now reads the
    # rows as the shuffled Dataset shows them (fails before: no such fix named).
    datasets = pytest.importorskip("datasets")
    from headrace.errors import ConfigError
    from headrace.formats import TableSource

    datasets.Dataset.from_dict({"x": list(range(50))}).save_to_disk(tmp_path / "base")
    ds = datasets.load_from_disk(str(tmp_path / "base")).shuffle(seed=1)
    with pytest.raises(ConfigError) as caught:
        TableSource(ds)
    said = str(caught.value)
    assert "pass ds.flatten_indices() (a Dataset in files" in said
    assert "ds.flatten_indices().save_to_disk(path) and pass that path" in said
    ds.flatten_indices().save_to_disk(tmp_path / "flat")
    for given in (ds.flatten_indices(), tmp_path / "flat"):
        src = TableSource(given, shuffle=False)
        assert src.read(0, np.arange(50))["x"].tolist() == ds["x"]
        src.close()
