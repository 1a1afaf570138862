from __future__ import annotations

import argparse
import json
import mmap
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from _bench_run import bench_file, schema

from headrace.cli import main

TINY = ["--token-file-gib", "0.004", "--steps", "20", "--trials", "2", "--warmup", "3", "-q"]


def bench(tmp_path: Path, *extra: str) -> tuple[int, dict[str, object]]:
    out = tmp_path / "r.json"
    rc = main(["bench", "--root", str(tmp_path / "data"), *TINY, "--json", str(out), *extra])
    return rc, json.loads(out.read_text())


def test_default_suite_tiny_validates_and_agrees(tmp_path: Path) -> None:
    rc, report = bench(tmp_path)
    assert rc == 0
    jsonschema.validate(report, schema())
    results = report["results"]
    assert isinstance(results, list)
    assert [r["variant"] for r in results] == ["naive", "headrace-sync", "headrace-async", "memcpy"]
    digests = {r["digest"] for r in results if r["variant"] != "memcpy"}
    assert len(digests) == 1 and None not in digests
    assert results[3]["digest"] is None
    for r in results:
        assert r["workload"] == "tokens"
        # payload: B x (L + 1) x 4 bytes per batch, for every variant
        assert r["bytes_delivered"] == 32 * 1025 * 4 * (3 + 2 * 20)
        assert r["amplification"] >= 1
        assert r["peak_rss_bytes"] > 0
    assert isinstance(report["machine"], dict) and report["machine"]["cores"] >= 1
    for r in results:
        # Other kinds' table shows the trials: `table` repeats the result's own figures.
        t = r["table"]
        # 20-step trials: short beside the read-ahead queue of headrace-async and the
        # chunks headrace-sync gathers ahead (naive and memcpy were starred too until
        # 2026-12-03)
        ahead = r["variant"] in ("headrace-sync", "headrace-async")
        assert t["from"] == "trials" and r["read_ahead"] is ahead
        assert t["short_trials"] is r["read_ahead"]
        assert t["batches_per_s"] == r["batches_per_s"] and t["gb_per_s"] == r["gb_per_s"]
        assert t["batches_per_s_spread"] == {
            k: r["batches_per_s_spread"][k] for k in ("min", "max")
        }
        assert (t["ratio_to_baseline"], t["ratio_to_memcpy"]) == (
            r["ratio_to_baseline"],
            r["ratio_to_memcpy"],
        )
    # Where the time went: the Loader's split for headrace variants, none for the others.
    stages = {r["variant"]: r["stages"] for r in results}
    assert stages["naive"]["source_s"] is None and stages["memcpy"]["plan_s"] is None
    sync, async_ = stages["headrace-sync"], stages["headrace-async"]
    assert sync["source_s"] > 0 and sync["plan_s"] > 0 and sync["queue_wait_s"] == 0
    # Without read-ahead the consumer's own next() plans and reads: the parts fit in it.
    assert sync["plan_s"] + sync["source_s"] + sync["prefetch_s"] <= sync["loader_s"]
    assert async_["source_s"] > 0 and async_["queue_wait_s"] >= 0


def test_a_sweep_of_variants_with_options_keeps_naive_and_memcpy_as_baselines(
    tmp_path: Path,
) -> None:
    # headrace-sync?prefetch=0&block_mib=1 was shown over itself (x base 1.00x, x memcpy -).
    variants = "naive,headrace-sync?prefetch=0,memcpy"
    rc, report = bench(tmp_path, "--variants", variants, "--sweep", "block_mib=1,4", "--no-isolate")
    assert rc == 0
    results = report["results"]
    assert isinstance(results, list)
    by = {r["variant"]: r for r in results}
    for m in (1, 4):
        r, naive = by[f"headrace-sync?prefetch=0&block_mib={m}"], by[f"naive?block_mib={m}"]
        memcpy = by[f"memcpy?block_mib={m}"]
        assert r["baseline_variant"] == f"naive?block_mib={m}"
        assert r["ratio_to_baseline"] == r["batches_per_s"] / naive["batches_per_s"]
        assert r["ratio_to_memcpy"] == r["batches_per_s"] / memcpy["batches_per_s"]


def test_plot_from_a_report_draws_what_the_run_drew(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--json r.json`, then the plot: it took a whole new run (`--plot` runs the bench).
    pytest.importorskip("matplotlib")
    ran = tmp_path / "ran.png"
    args = ["--variants", "headrace-sync,memcpy", "--sweep", "block_mib=1,4", "--no-isolate"]
    rc, report = bench(tmp_path, *args, "--plot", str(ran))
    assert rc == 0 and report["sweep"] == "block_mib=1,4"
    report_path = str(tmp_path / "r.json")
    drawn = tmp_path / "drawn.png"
    assert main(["bench", "plot", report_path, "--plot", str(drawn)]) == 0
    assert drawn.read_bytes() == ran.read_bytes()  # against the swept values, as the run
    # a report from before "sweep" was recorded: read from its command line
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**report, "sweep": None, "command": ["headrace", "bench", *args]}))
    again = tmp_path / "again.png"
    assert main(["bench", "plot", str(old), "--plot", str(again)]) == 0
    assert again.read_bytes() == ran.read_bytes()
    capsys.readouterr()
    # refused: the image over the report, a file that is not a report, an unknown format
    for argv, said in (
        (["plot", report_path, "--plot", report_path], "the plot would replace the report"),
        (["plot", str(ran), "--plot", str(drawn)], "ran.png: cannot be read"),
        (["plot", report_path, "--plot", str(tmp_path / "p.txt")], "matplotlib writes"),
    ):
        assert main(["bench", *argv]) == 2
        assert said in capsys.readouterr().err


def test_a_reader_that_goes_away_does_not_lose_the_report(tmp_path: Path) -> None:
    # `headrace bench --json r.json | head -1`: the pipe broke while the table printed,
    # before the report was written (fails before: no r.json after the run).
    import sys

    out = tmp_path / "r.json"
    src = str(Path(__file__).resolve().parents[2] / "src")
    argv = ["bench", "--root", str(tmp_path / "data"), *TINY, "--no-isolate", "--json", str(out)]
    with subprocess.Popen(
        [sys.executable, "-m", "headrace", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": src},
    ) as proc:
        assert proc.stdout is not None
        proc.stdout.close()  # the reader is gone before the first line
        assert proc.wait(timeout=300) == 141
    report = json.loads(out.read_text())
    jsonschema.validate(report, schema())
    assert len(report["results"]) == 4


def test_first_batch_reads_the_blocks_it_touches_not_the_window(tmp_path: Path) -> None:
    # A 64 MiB file read in one window of 256 KiB blocks: step 0's 32 samples touch at
    # most 64 of its 256 blocks, so reading the window would break the bound of
    # twice the blocks touched.
    rc, report = bench(
        tmp_path,
        "--token-file-gib",
        "0.0625",
        "--variants",
        "naive,headrace-sync?block_mib=0.25,headrace-async?block_mib=0.25",
    )
    assert rc == 0
    jsonschema.validate(report, schema())
    results = report["results"]
    assert isinstance(results, list)
    for r in results[1:]:
        touched = r["first_batch_block_bytes"]
        assert 0 < touched <= 64 * (256 << 10) < (64 << 20)
        assert r["bytes_before_first_batch"] > 0, r["variant"]
    # The Loader reads nothing ahead until the first batch is handed over. (With a
    # read-ahead thread, its reads for the next chunk race the count taken on delivery.)
    # A mapped window's first batch waits for its samples' pages only, the rest of their
    # blocks filling behind it: fewer bytes than the blocks it touches.
    sync = results[1]
    if populate_works():
        assert sync["bytes_before_first_batch"] < sync["first_batch_block_bytes"]
    else:  # reads="pread" windows (kernels before 5.14) wait for whole blocks
        assert sync["bytes_before_first_batch"] <= 2 * sync["first_batch_block_bytes"]
    assert "first_batch_block_bytes" not in results[0]


def populate_works() -> bool:
    m = mmap.mmap(-1, mmap.PAGESIZE)
    try:
        m.madvise(22)  # MADV_POPULATE_READ, Linux 5.14
        return True
    except OSError:
        return False
    finally:
        m.close()


def test_dataset_is_cached_between_runs(tmp_path: Path) -> None:
    bench(tmp_path, "--variants", "memcpy", "--no-isolate")
    (path,) = (tmp_path / "data").glob("*.bin")
    mtime = path.stat().st_mtime_ns
    bench(tmp_path, "--variants", "memcpy", "--no-isolate")
    assert path.stat().st_mtime_ns == mtime


def test_planted_mismatch_exits_nonzero_naming_variants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = "naive,headrace-sync,headrace-sync?seed=1"
    rc, report = bench(tmp_path, "--variants", specs, "--no-isolate")
    assert rc == 1
    err = capsys.readouterr().err
    assert "[naive, headrace-sync] vs [headrace-sync?seed=1]" in err
    assert report["workloads"][0]["mismatches"] == [  # type: ignore[index]
        ["naive", "headrace-sync"],
        ["headrace-sync?seed=1"],
    ]


def test_unknown_workload_and_variant_are_config_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--root", str(tmp_path), "--workload", "nope", "-q"]) == 2
    assert "unknown workload 'nope': not a file" in capsys.readouterr().err
    assert main(["bench", "--root", str(tmp_path), "--workload", "token", "-q"]) == 2
    assert "unknown workload 'token' (did you mean 'tokens'?): not a" in capsys.readouterr().err
    assert main(["bench", "--root", str(tmp_path), "--variants", "fast", "-q"]) == 2
    assert "unknown variant 'fast' for kind" in capsys.readouterr().err
    # The nearest is named, as for a workload (it listed the known ones alone).
    assert main(["bench", "--root", str(tmp_path), "--variants", "headrace-synk", "-q"]) == 2
    assert "unknown variant 'headrace-synk' (did you mean 'headrace-sync'?) for kind 'tokens'" in (
        capsys.readouterr().err
    )
    # A value that does not parse says what to give: it said "'x' is not a int like the
    # reader's 8".
    args = ["bench", "--root", str(tmp_path), "--variants", "naive", "--sweep", "prefetch=1,x"]
    assert main([*args, *TINY]) == 2
    assert (
        "variant 'naive?prefetch=x': prefetch='x' is not a number, as the reader's prefetch is "
        "(8); give one, e.g. prefetch=8" in capsys.readouterr().err
    )


def test_files_sets_how_many_files_and_only_for_files_workloads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from headrace.bench._cli import configure
    from headrace.bench._overrides import override
    from headrace.bench._workload import builtin_workloads

    parser = argparse.ArgumentParser()
    configure(parser)
    wl = override(builtin_workloads()["npz"], parser.parse_args(["--files", "3"]))
    assert wl.dataset["files"] == 3
    assert main(["bench", "--root", str(tmp_path), "--files", "3", "-q"]) == 2  # tokens
    assert "--files sizes the jpeg, npz, hdf5, parquet workloads; 'tokens' takes none" in (
        capsys.readouterr().err
    )


def test_too_few_files_for_a_batch_of_iterable_is_refused_before_generating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `bench -w jpeg --files 4` (batch 8): the iterable variant drops an epoch's partial
    # batch, so it has none at all; this was found after the dataset was written (and,
    # with --storage s3, uploaded), with the other variants' minutes spent.
    root = tmp_path / "r"
    assert main(["bench", "-w", "jpeg", "--files", "4", "--root", str(root), "-q"]) == 2
    err = capsys.readouterr().err
    assert "variant 'iterable' drops each epoch's last partial batch" in err
    assert "an epoch of 4 samples gives no whole batch of 8" in err
    assert not root.exists() or not any(root.iterdir())
    # Without it, or with batches that fit, the same files run (checked, not run, here).
    from headrace.bench._cli import check, configure

    parser = argparse.ArgumentParser()
    configure(parser)
    for extra in (["--batch-size", "4"], ["--variants", "map-style"]):
        check(parser.parse_args(["-w", "jpeg", "--files", "4", "--root", str(root), *extra]))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--sweep", "in_flight"], "--sweep 'in_flight': expected KEY=V1,V2"),
        (["--sweep", "=1,2"], "--sweep '=1,2': expected KEY=V1,V2"),
        (["--sweep", "in_flight="], "--sweep 'in_flight=': expected KEY=V1,V2"),
        (["--accelerators", "x"], "--accelerators 'x': expected a whole number >= 1 or 'auto'"),
        (["--accelerators", "0"], "--accelerators '0': expected a whole number >= 1"),
        (["--dlio", "missing.yaml"], "--dlio 'missing.yaml': no such file"),
        (["--json", "no/such/dir/r.json"], "does not exist; create it first"),
        (["--plot", "."], "--plot '.' is a folder"),
        (["--plot", "p.txt"], "--plot 'p.txt': matplotlib writes"),  # crashed after the run
        # Blamed padded.toml for an unknown key token_file_gib before.
        (["-w", "padded", "--token-file-gib", "1"], "--token-file-gib sizes the tokens, megatron"),
        (["compare", "only-one.json"], "got 'compare only-one.json'; the only actions are"),
        (["frob"], "got 'frob'; the only actions are 'compare A.json B.json' (two reports"),
        (["plot", "r.json"], "plot r.json: give the image to write with --plot"),
    ],
)
def test_bad_arguments_say_what_and_how_to_fix(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    expected: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--root", str(tmp_path / "data"), "-q", *args]) == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "data").exists()  # refused before any dataset was written


def test_plot_without_matplotlib_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fault injection: matplotlib hidden, as on a machine without the plot extra.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    assert main(["bench", "--root", str(tmp_path / "data"), "-q", "--plot", "r.png"]) == 2
    err = capsys.readouterr().err
    assert "--plot needs matplotlib, which is not installed: pip install 'headrace[plot]'" in err
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--steps", "0"], "--steps 0: expected a whole number >= 1, e.g. --steps 100"),
        (["--steps", "-3"], "--steps -3: expected a whole number >= 1"),
        (["--trials", "0"], "--trials 0: expected a whole number >= 1"),
        (["--batch-size", "0"], "--batch-size 0: expected a whole number >= 1"),
        (["--files", "-1"], "--files -1: expected a whole number >= 1"),
        (["--warmup", "-1"], "--warmup -1: expected a whole number >= 0"),
        (["--scale", "-1"], "--scale -1: expected a number > 0, e.g. --scale 0.1"),
        (["--scale", "0"], "--scale 0: expected a number > 0"),
        (["--scale", "nan"], "--scale nan: expected a number > 0"),
        (["--record-scale", "0"], "--record-scale 0: expected a number > 0"),
        (["--token-file-gib", "0"], "--token-file-gib 0: expected a number > 0"),
        (["--latency-ms", "-5"], "--latency-ms -5: expected a number >= 0"),
        (["--max-concurrent", "0"], "--max-concurrent 0: expected a whole number >= 1"),
        (["--accelerators", "0"], "--accelerators '0': expected a whole number >= 1"),
        (["--accelerators", "-2"], "--accelerators '-2': expected a whole number >= 1"),
        (["--sweep", "in_flight"], "--sweep 'in_flight': expected KEY=V1,V2"),
        (["--storage", "local", "--endpoint", "http://x"], "need --storage s3"),
        # in range, but without --dlio nothing reads them
        (["--scale", "0.1"], "--scale scales a --dlio workload and nothing else: drop it"),
        (["--record-scale", "2", "--scale", "1"], "--scale and --record-scale scale a --dlio"),
    ],
)
@pytest.mark.parametrize("listing", [[], ["--list"], ["--list", "-w", "jpeg"]])
def test_out_of_range_values_are_refused_with_list_too(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    expected: str,
    listing: list[str],
) -> None:
    # --list printed the built-in workloads for values a run refuses (--steps 0, --scale -1).
    assert main(["bench", "--root", str(tmp_path / "data"), "-q", *listing, *args]) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert not (tmp_path / "data").exists()


def test_compare_refuses_missing_and_foreign_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"results": []}))
    assert main(["bench", "compare", str(tmp_path / "nope.json"), str(good)]) == 2
    assert "nope.json: no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    assert main(["bench", "compare", str(good), str(bad)]) == 2
    assert "bad.json: not JSON" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"results": [{"x": 1}]}))
    assert main(["bench", "compare", str(good), str(other)]) == 2
    assert "other.json: not a headrace bench report" in capsys.readouterr().err
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe{}")
    assert main(["bench", "compare", str(good), str(tmp_path / "binary.json")]) == 2
    assert "binary.json: cannot be read (" in capsys.readouterr().err
    (tmp_path / "dir.json").mkdir()
    assert main(["bench", "compare", str(tmp_path / "dir.json"), str(good)]) == 2
    assert "dir.json: cannot be read ([Errno 21] Is a directory" in capsys.readouterr().err


def test_compare_prints_ratios_and_digest_agreement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def report(path: Path, rate: float, digest: str) -> str:
        row = {"workload": "tokens", "variant": "naive", "batches_per_s": rate, "digest": digest}
        path.write_text(json.dumps({"results": [row]}))
        return str(path)

    a = report(tmp_path / "a.json", 100.0, "d1")
    b = report(tmp_path / "b.json", 250.0, "d2")
    zero = report(tmp_path / "z.json", 0.0, "d1")
    # Other bytes over the same data and plan: exit 1, as a run whose variants disagree
    # (0 until 2026-12-06: a script comparing with a baseline passed it).
    assert main(["bench", "compare", a, b]) == 1
    out, err = capsys.readouterr()
    assert "2.50x" in out and "DIFFERS" in out
    assert "1 variant(s) delivered other bytes in B than in A" in err
    assert main(["bench", "compare", zero, a]) == 0  # no ZeroDivisionError
    assert "same" in capsys.readouterr().out
    none = tmp_path / "n.json"
    row = {"workload": "tokens", "variant": "naive", "batches_per_s": 1.0, "digest": None}
    none.write_text(json.dumps({"results": [row]}))
    assert main(["bench", "compare", str(none), str(none)]) == 0
    out = capsys.readouterr().out
    assert "not digested" in out and "same" not in out

    # A files workload is compared by its fresh pass, as its table shows it (its trials
    # start from a queue filled while other variants ran: 13,454 vs 88 batches/s once);
    # runs of other lengths are not called different; a variant in one report only is said.
    def files(path: Path, trials: float, wall: float, steps: int, extra: bool = False) -> str:
        row = {"workload": "jpeg", "variant": "headrace", "batches_per_s": trials, "digest": "x"}
        row |= {"mb_per_s": 1.0, "steps": steps, "stages": {"wall_s": wall}}
        rows = [row, {**row, "variant": "iterable"}] if extra else [row]
        path.write_text(json.dumps({"results": rows}))
        return str(path)

    a = files(tmp_path / "fa.json", 13_454.0, 4.0, 100, extra=True)  # 25 batches/s fresh
    b = files(tmp_path / "fb.json", 88.0, 2.0, 100)  # 50 batches/s fresh
    assert main(["bench", "compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "2.00x" in out and "0.01x" not in out and "iterable" in out and "only in A" in out
    b = files(tmp_path / "fc.json", 88.0, 2.0, 50)
    b_text = Path(b).read_text().replace('"x"', '"y"')
    Path(b).write_text(b_text)
    assert main(["bench", "compare", a, b]) == 0
    assert "not compared (100 vs 50 steps)" in capsys.readouterr().out


def test_compare_shows_au_and_max_accelerators_where_a_report_has_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two storages under the same DLIO workload: compare showed batches/s alone, not the
    # AU or how many accelerators each kept busy, what the runs were for.
    def report(path: Path, au: float | None, acc: int | None) -> str:
        row = {"workload": "unet3d", "variant": "headrace", "batches_per_s": 5.0, "digest": "d"}
        row |= {"au": au, "au_pass": au is not None and au >= 0.9, "max_accelerators": acc}
        path.write_text(json.dumps({"results": [row]}))
        return str(path)

    a = report(tmp_path / "a.json", 0.71, None)
    b = report(tmp_path / "b.json", 0.96, 3)
    assert main(["bench", "compare", a, b]) == 0
    head, row = capsys.readouterr().out.splitlines()
    assert head.split()[6:] == ["AU", "A", "B", "max", "acc.", "A", "B", "digest"]
    assert row.split()[5:] == ["0.71", "FAIL", "0.96", "ok", "-", "3", "same"]
    plain = report(tmp_path / "p.json", None, None)  # no compute: no such columns
    assert main(["bench", "compare", plain, plain]) == 0
    assert "AU" not in capsys.readouterr().out


def test_compare_order_free_variants_by_their_canonical_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # ceiling and iterable hand samples over as fetches complete: two runs of one plan gave
    # the same samples in another order, and compare said DIFFERS (its digest is in order).
    def report(path: Path, compared: str | None, digest: str, canonical: str) -> str:
        row = {"workload": "npz", "variant": "ceiling", "batches_per_s": 1.0, "steps": 4}
        row |= {"digest": digest, "canonical_digest": canonical, "digest_compared": compared}
        path.write_text(json.dumps({"results": [row]}))
        return str(path)

    cases = [
        ("canonical", "c1", "same (canonical)"),
        ("canonical", "c2", "DIFFERS (canonical)"),
        (None, "c1", "not compared (another order by design)"),
    ]
    for compared, canonical, said in cases:
        a = report(tmp_path / "a.json", compared, "d1", "c1")
        b = report(tmp_path / "b.json", compared, "d2", canonical)
        assert main(["bench", "compare", a, b]) == int(said.startswith("DIFFERS"))
        line = capsys.readouterr().out.splitlines()[1]
        assert line.endswith(said), line


def test_compare_says_when_the_reports_ran_other_data_or_batches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A 0.25 GiB token file against a 0.0625 GiB one, or batches of 32 against 16, read
    # "DIFFERS" (as if a loader had broken) and batch 16 "1.69x" faster (batches/s of
    # half the batch). Their samples differ by design: said, and B/A is of samples/s.
    def report(path: Path, rate: float, digest: str, gib: float, batch: int) -> str:
        row = {"workload": "tokens", "variant": "naive", "batches_per_s": rate}
        row |= {"digest": digest, "steps": 500}
        wl = {"kind": "tokens", "dataset": {"token_file_gib": gib}, "reader": {"prefetch": 8}}
        wl["train"] = {"batch_size": batch, "seed": 0, "world_size": 1, "rank": 0}
        path.write_text(
            json.dumps({"workloads": [{"name": "tokens", "workload": wl}], "results": [row]})
        )
        return str(path)

    a = report(tmp_path / "a.json", 100.0, "d1", 0.25, 32)
    b = report(tmp_path / "b.json", 150.0, "d2", 0.0625, 32)
    assert main(["bench", "compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "DIFFERS" not in out and "1.50x  not compared (other data or plan" in out
    assert (
        "note: tokens: the reports ran other data or another plan (dataset.token_file_gib"
        " 0.25 vs 0.0625)" in out
    )
    b = report(tmp_path / "b.json", 150.0, "d2", 0.25, 16)
    assert main(["bench", "compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "0.75x" in out and "(train.batch_size 32 vs 16)" in out and "DIFFERS" not in out
    # Other reader settings are what a comparison is for: the digests must still agree.
    b = report(tmp_path / "b.json", 150.0, "d2", 0.25, 32)
    text = Path(b).read_text().replace('"prefetch": 8', '"prefetch": 0')
    Path(b).write_text(text)
    assert main(["bench", "compare", a, b]) == 1
    out = capsys.readouterr().out
    assert "1.50x  DIFFERS" in out and "note:" not in out


@pytest.mark.parametrize("isolate", [[], ["--no-isolate"]])
def test_option_that_changes_nothing_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], isolate: list[str]
) -> None:
    # tokens variants have no in_flight: a sweep of it would measure the same thing N times
    args = ["bench", "--root", str(tmp_path / "data"), *TINY, *isolate]
    assert main([*args, "--variants", "naive,headrace-sync", "--sweep", "in_flight=1,8"]) == 2
    err = capsys.readouterr().err
    assert "variant 'naive?in_flight=1': unknown option 'in_flight'" in err
    assert "it would change nothing" in err
    assert "block_mib, prefetch, seed, window_mib" in err and "Traceback" not in err


def test_seed_and_own_options_are_accepted(tmp_path: Path) -> None:
    specs = "naive?seed=3,headrace-sync?seed=3&reads=pread,headrace-async?prefetch=2&seed=3"
    rc, report = bench(tmp_path, "--variants", specs, "--no-isolate")
    assert rc == 0
    assert len({r["digest"] for r in report["results"]}) == 1  # type: ignore[union-attr]


@pytest.mark.parametrize("command", ["bench", "gen"])
def test_unusable_root_is_refused_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    args = ["bench", "-q", *TINY] if command == "bench" else ["gen", "tokens", "-q"]
    assert main([*args, "--root", str(a_file / "sub")]) == 2
    err = capsys.readouterr().err
    assert f"--root '{a_file / 'sub'}': cannot create the dataset folder" in err
    assert "choose a writable folder" in err
    # The file itself: "cannot create the dataset folder (File exists)", as if it were one.
    assert main([*args, "--root", str(a_file)]) == 2
    assert f"--root '{a_file}' is a file, not a folder" in capsys.readouterr().err


def test_a_read_only_root_with_its_dataset_runs_and_one_without_says_what_to_do(
    tmp_path: Path, slow_mount, capsys: pytest.CaptureFixture[str]
) -> None:
    # A network mount holding datasets written elsewhere: slowfs is a read-only view.
    data = tmp_path / "data"
    # Written here first (measured in this process: the read-only run is the one checked).
    rc, local = bench(tmp_path, "--variants", "naive,headrace-sync", "--no-isolate")
    assert rc == 0
    assert not any("network or FUSE" in n for n in local["notes"])  # type: ignore[union-attr]
    m = slow_mount(data, read_latency_ms=1)
    out = tmp_path / "ro.json"
    args = ["bench", "--root", str(m.mnt), *TINY, "--variants", "naive,headrace-sync"]
    assert main([*args, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["root"] == str(m.mnt)
    assert len({r["digest"] for r in report["results"]}) == 1
    assert any("on a network or FUSE file system" in n for n in report["notes"])
    assert report["machine"]["storage"]["network"] is True
    empty = tmp_path / "empty"
    empty.mkdir()
    m2 = slow_mount(empty)
    assert main(["bench", "--root", str(m2.mnt), *TINY]) == 2
    err = capsys.readouterr().err
    assert f"--root '{m2.mnt}' is read-only and workload 'tokens'" in err
    # The command writes the dataset this run reads: the sizes it was given go with it.
    assert "headrace gen tokens --token-file-gib 0.004 --root DIR" in err
    dlio = str(Path(__file__).parent.parent / "data" / "dlio" / "resnet50_v100.yaml")
    sizes = ["--scale", "0.0001", "--record-scale", "0.01"]
    assert main(["bench", "--dlio", dlio, *sizes, "--root", str(m2.mnt), "-q"]) == 2
    assert f"headrace gen --dlio {dlio} {' '.join(sizes)} --root DIR" in capsys.readouterr().err


def test_a_read_only_root_written_before_sizes_were_recorded_still_runs(
    tmp_path: Path, slow_mount
) -> None:
    # Datasets written before .headrace-sizes.json existed have none; recording the sizes
    # on a read-only mount failed and read as "the dataset is missing or incomplete".
    data = tmp_path / "data"
    rc, _ = bench(tmp_path, "--variants", "naive", "--no-isolate")
    assert rc == 0
    (data / ".headrace-sizes.json").unlink()
    m = slow_mount(data)
    args = ["bench", "--root", str(m.mnt), *TINY, "--variants", "naive"]
    assert main(args) == 0
    assert not (data / ".headrace-sizes.json").exists()


_TRAIN = (
    "[train]\nbatch_size = 4\nsteps = 3\ntrials = 1\nwarmup_steps = 1\ncomputation_time = 0.001\n"
)
EVERY_KIND = {
    "tokens": '"naive", "headrace-sync", "headrace-async", "memcpy"]\n[dataset]\n'
    "token_file_gib = 0.002\ncontext = 64\n",
    "megatron": '"naive", "headrace-sync"]\n[dataset]\ndtype = "uint16"\n'
    "token_file_gib = 0.0005\ncontext = 32\ndocument_tokens = 256\n[reader]\n"
    "window_mib = 0.25\nblock_mib = 0.0625\n",
    "files": '"map-style", "iterable", "headrace", "headrace-raw", "ceiling"]\n[dataset]\n'
    'format = "npz"\nfiles = 8\nrecord_bytes = 300\n',
    "rows": '"naive", "headrace"]\n[dataset]\nrows = 24\nwidth = 17\n',
    "tables": '"naive", "headrace"]\n[dataset]\nrows = 24\nwidth = 17\n',
    "parquet": '"naive", "headrace"]\n[dataset]\nrows = 40\nwidth = 9\nfiles = 2\n'
    "group_rows = 8\n[reader]\nwindow_rows = 16\n",
    "table-images": '"naive", "headrace", "headrace-raw"]\n[dataset]\nrows = 20\nfiles = 2\n'
    "group_rows = 5\nimage_hw = [8, 12]\n[reader]\nwindow_rows = 10\n",
    "packed": '"naive", "headrace-sync", "group-texts"]\n[dataset]\nrows = 200\nmax_len = 50\n'
    "batch_rows = 64\ncontext = 32\n",
}


def test_every_kind_validates_against_the_strict_schema(tmp_path: Path) -> None:
    # The schema named fewer fields than the reports held (unique_bytes_delivered, the
    # trials' spread, the demand and the storage ceiling were in no schema) and allowed
    # any other: a misspelt or retyped field passed. Now each result, stage and workload
    # is closed, so this run of every kind holds the schema to what the reports write.
    out = tmp_path / "r.json"
    args = ["bench", "--root", str(tmp_path / "d"), "-q", "--no-isolate", "--json", str(out)]
    for kind, text in EVERY_KIND.items():
        path = tmp_path / f"{kind}.toml"
        path.write_text(f'name = "{kind}"\nkind = "{kind}"\nvariants = [{text}{_TRAIN}')
        args += ["-w", str(path)]
    assert main([*args, "--accelerators", "auto"]) == 0
    report = json.loads(out.read_text())
    jsonschema.validate(report, schema())
    assert {w["kind"] for w in report["workloads"]} == set(EVERY_KIND)
    assert all(r["max_accelerators"] is not None for r in report["results"] if r["digest"])
    # Sizes in the unit that reads: 8 NPZ files of 300 B records were "the dataset (0.0 MB)".
    sizes = [n.partition("the dataset (")[2].partition(")")[0] for n in report["notes"]]
    assert "files: the dataset (" in " ".join(report["notes"])
    assert all(s and not s.startswith("0.0 ") for s in sizes if s)


@pytest.mark.parametrize(
    ("where", "key", "value"),
    [
        ("result", "au", "0.9"),  # a number written as text
        ("result", "au", 1.5),  # above the range
        ("result", "bytes_read", -1),
        ("result", "amplificaton", 1.0),  # a misspelt field
        ("result", "digest", "not-a-sha256"),
        ("result", "max_accelerators", "3"),
        ("stages", "wall_s", "1"),
        ("stages", "read_seconds", 1.0),
        ("workload", "demand_bytes_per_s", "fast"),
        ("workload", "failed", [{"variant": "headrace"}]),  # no error said
        ("workload", "mismatches", ["a", "b"]),  # groups are lists
        ("table", "from", "median"),  # fresh_pass or trials
        ("table", "batches_per_s", "29"),
        ("table", "batches_per_s_spread", {"min": 1.0}),
        ("result", "table", None),  # every result has one (from 2026-12-03)
    ],
)
def test_the_schema_refuses_a_wrong_field(where: str, key: str, value: object) -> None:
    result = {
        "workload": "w",
        "variant": "headrace",
        "batches_per_s": 10.0,
        "gb_per_s": 0.1,
        "digest": "0" * 64,
        "bytes_before_first_batch": 0,
        "peak_rss_bytes": None,
        "bytes_read": 1,
        "bytes_delivered": 1,
        "amplification": 1.0,
        "ratio_to_baseline": 1.0,
        "ratio_to_memcpy": None,
        "time_to_first_batch_s": 0.1,
        "au": 0.95,
        "max_accelerators": 3,
        "stages": {"wall_s": 1.0},
        "table": {
            "from": "trials",
            "batches_per_s": 10.0,
            "batches_per_s_spread": {"min": 9.0, "max": 11.0},
            "gb_per_s": 0.1,
            "ratio_to_baseline": 1.0,
            "ratio_to_memcpy": None,
            "short_trials": False,
        },
    }
    workload = {
        "name": "w",
        "kind": "files",
        "dataset_bytes": 1,
        "payload_bytes_per_batch": 1,
        "memory": {},
        "mismatches": [],
    }
    report = {
        "schema": "headrace.bench/1",
        "machine": {
            "cpu_model": "x",
            "cores": 2,
            "memory_bytes": 1,
            "python": "3.11",
            "libraries": {},
            "start_method": "fork",
        },
        "results": [result],
        "workloads": [workload],
        "elapsed_s": 1.0,
    }
    jsonschema.validate(report, schema())  # the report as it is passes
    target = {
        "result": result,
        "stages": result["stages"],
        "workload": workload,
        "table": result["table"],
    }[where]
    target[key] = value  # type: ignore[index]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, schema())


@pytest.mark.parametrize("output", ["--json", "--plot"])
def test_list_refuses_an_output_it_would_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    # --list --json r.json listed the workloads, wrote no r.json and exited 0: a script
    # that reads r.json next found nothing (or last run's figures).
    out = tmp_path / ("r.json" if output == "--json" else "r.png")
    assert main(["bench", "--root", str(tmp_path / "data"), "--list", output, str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{output} writes a run's report; --list runs nothing" in err
    assert not out.exists()


@pytest.fixture
def unwritable_file(tmp_path: Path) -> Iterator[Path]:
    """A file in a writable folder that cannot be written (immutable for root)."""
    f = tmp_path / "old.json"
    f.write_text("{}\n")
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(f)], capture_output=True).returncode:
            pytest.skip("chattr +i is not available here (root writes any file)")
        try:
            yield f
        finally:
            subprocess.run(["chattr", "-i", str(f)], check=True)
    else:
        f.chmod(0o444)
        yield f


@pytest.mark.parametrize("command", ["bench", "probe"])
def test_an_unwritable_json_file_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], unwritable_file: Path, command: str
) -> None:
    # The folder was checked, the file not: the run went its whole length, printed its
    # figures and then failed to write the report.
    if command == "bench":
        args = ["bench", "--root", str(tmp_path / "data"), *TINY, "--no-isolate"]
    else:
        args = ["probe", str(tmp_path), "--size", "4M", "--ops", "8"]
    assert main([*args, "--json", str(unwritable_file)]) == 2
    captured = capsys.readouterr()
    assert f"--json '{unwritable_file}' is not writable" in captured.err
    assert "sha256" not in captured.out and "MB/s" not in captured.out  # nothing ran
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("command", ["bench", "probe", "check", "cache"])
def test_a_json_path_whose_folder_refuses_a_create_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # /proc passes access(W_OK) for root (the mode bits; a FUSE mount without allow_root
    # or a root-squashed NFS export does the same), but no file can be created in it: as
    # root the run went its whole length, printed its figures, then failed "could not
    # write /proc/headrace-r.json". (A user who is not root is refused by access().)
    out = "/proc/headrace-r.json"
    (tmp_path / "cache").mkdir()
    args = {
        "bench": ["bench", "--root", str(tmp_path / "data"), *TINY, "--no-isolate"],
        "probe": ["probe", str(tmp_path), "--size", "4M", "--ops", "8"],
        "check": ["check", str(tmp_path / "cache"), "--format", "npy"],
        "cache": ["cache", str(tmp_path / "cache"), "--clear"],
    }[command]
    assert main([*args, "--json", out]) == 2
    captured = capsys.readouterr()
    assert f"--json {out!r}" in captured.err and "choose a writable path" in captured.err
    assert "Traceback" not in captured.err
    assert "sha256" not in captured.out and "MB/s" not in captured.out  # nothing ran
    assert "removed" not in captured.out
    assert not (tmp_path / "data").exists()


def test_a_json_fifo_gets_the_report_once(tmp_path: Path) -> None:
    # The check before the run opens a new or regular --json path to see that it can be
    # written; a FIFO (`mkfifo r.json; jq . < r.json &`) is left to the write at the end:
    # opened and closed before the run, its reader took the close for the end of the
    # report, and the report's own open then waited for a reader that never came.
    import json
    import threading

    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    reads: list[str] = []

    def reader() -> None:
        for _ in range(2):  # each open of the write end, to its close
            with open(fifo) as f:
                reads.append(f.read())
            if reads[-1]:
                return

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    args = ["probe", str(tmp_path), "--size", "4M", "--ops", "8", "--json", str(fifo)]
    assert main(args) == 0
    thread.join(30)
    assert len(reads) == 1 and json.loads(reads[0])["results"]


def test_the_demand_line_gives_what_n_accelerators_need(tmp_path: Path) -> None:
    # --accelerators 4 printed one accelerator's demand only (the JSON had 4x), and a
    # small one as "0.0 MB/s per accelerator" (DLIO llama_7b at --record-scale 0.01).
    from headrace.bench._cli import _demand
    from headrace.bench._kind import make_kind
    from headrace.bench._workload import builtin_workloads

    kind = make_kind(builtin_workloads()["hdf5"], str(tmp_path))
    assert _demand(kind) == (
        "batch 8 x 1.0 MB/record / 0.05 s compute = 160.0 MB/s per accelerator (AU >= 0.90)"
    )
    # 4 x 160.0 MB/s of stored bytes, HDF5's container included (each file's, as the
    # report counts it once generated)
    assert "160.0 MB/s per accelerator, x 4 = 640.1 MB/s (AU" in _demand(kind, 4)
    # raw records: no container beside them (an HDF5 file of 8 such records stores 117 B each)
    small = {"format": "raw", "samples_per_file": 1, "record_bytes": 20}
    wl = builtin_workloads()["hdf5"].replace(dataset=small, train={"batch_size": 2})
    assert "= 800 B/s per accelerator" in _demand(make_kind(wl, str(tmp_path)))


def test_list_gives_the_demand_of_the_accelerators_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--list --accelerators 4` gave one accelerator's demand; the run said "x 4 = ...".
    root = str(tmp_path)
    assert main(["bench", "--list", "-w", "hdf5", "--accelerators", "4", "--root", root]) == 0
    assert "160.0 MB/s per accelerator, x 4 = 640.1 MB/s (AU" in capsys.readouterr().out
    assert main(["bench", "--list", "--accelerators", "4", "--root", root]) == 0
    assert "x 4 = 640.1 MB/s" in capsys.readouterr().out  # the built-ins' hdf5 too


def test_au_of_one_step_trials_is_said_to_be_no_measurement(tmp_path: Path) -> None:
    # --steps 1 with compute printed "0.00 FAIL" for every variant and said nothing: DLIO
    # leaves each epoch's first step out, so a trial of one step has none to count.
    files = EVERY_KIND["files"].replace('"map-style", "iterable", ', "")
    text = f'name = "w"\nkind = "files"\nvariants = [{files}{_TRAIN}'
    report = bench_file(tmp_path, text, "--steps", "1")
    assert report["results"][0]["au"] == 0
    assert any("trials of 1 step leave no step to count" in n for n in report["notes"])


def test_a_root_on_tmpfs_is_said_to_be_memory_not_a_device(tmp_path: Path) -> None:
    # tmpfs takes O_DIRECT (Linux 6.6+), and its reads are memory: the run measured a
    # "device (O_DIRECT) read ceiling" of 1.40 GB/s there and called every variant above
    # it "served from the page cache", on a filesystem that has no device.
    from headrace.bench._probe import filesystem_of

    shm = Path("/dev/shm")
    if not shm.is_dir() or filesystem_of(str(shm))["fstype"] != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    root = shm / f"headrace-test-{os.getpid()}"
    out = tmp_path / "r.json"
    try:
        args = ["bench", "--root", str(root), *TINY, "--no-isolate", "--json", str(out)]
        assert main(args) == 0
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=True)
    report = json.loads(out.read_text())
    assert report["workloads"][0]["storage_ceiling"]["gb_per_s"] is None
    notes = " ".join(report["notes"])
    assert "read ceiling" not in notes.replace("no device to measure a read ceiling", "")
    assert "tokens: the dataset is on tmpfs (/dev/shm), which keeps files in memory" in notes


@pytest.mark.parametrize("command", ["bench", "gen"])
def test_files_with_dlio_is_refused_for_scale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # A DLIO workload is of the files kind, so --files was taken and replaced its file
    # count, under a plan ("2 epochs of 2 steps, one epoch per trial") worked out from
    # the YAML's: the trials then covered 2 epochs each.
    yaml = tmp_path / "d.yaml"
    yaml.write_text("dataset: {format: npz, num_files_train: 8, record_length_bytes: 100}\n")
    args = [command, "--dlio", str(yaml), "--files", "4", "--root", str(tmp_path / "d"), "-q"]
    assert main(args) == 2
    assert "--files 4: a --dlio workload has the YAML's num_files_train, scaled by --scale" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "d").exists()


def test_batch_size_with_dlio_makes_the_epoch_of_that_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --batch-size replaced the batch but kept the YAML's steps per epoch: 8 files at
    # batch 4 are 2 steps, and "one epoch per trial" at batch 8 covered two epochs.
    yaml = tmp_path / "d.yaml"
    text = "dataset: {format: npz, num_files_train: 8, record_length_bytes: 100}\n"
    yaml.write_text(text + "reader: {batch_size: 4}\ntrain: {epochs: 2}\n")
    args = ["bench", "--dlio", str(yaml), "--root", str(tmp_path / "d"), "--list"]
    assert main(args) == 0
    assert "2 epochs of 2 steps, one epoch per trial" in capsys.readouterr().out
    assert main([*args, "--batch-size", "8"]) == 0
    out = capsys.readouterr().out
    assert "2 epochs of 1 step, one epoch per trial" in out
    assert "batch 8 (--batch-size; the YAML's 4)" in out
    # --steps: the plan said "one epoch per trial" over trials of 3 epochs (fails before)
    assert main([*args, "--steps", "6"]) == 0
    out = capsys.readouterr().out
    assert "2 epochs of 2 steps, trials of 6 steps (--steps 6), not one epoch;" in out
    assert main([*args, "--steps", "2"]) == 0  # one epoch, as the YAML's
    assert "2 epochs of 2 steps, one epoch per trial" in capsys.readouterr().out


@pytest.mark.parametrize("listing", [[], ["--list"]])
def test_dlio_and_workloads_together_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], listing: list[str]
) -> None:
    # `--dlio unet3d_h100.yaml -w tokens` ran the YAML alone: the -w workloads were left
    # out without a word (fails before: exit 0 and a report of the DLIO workload only).
    dlio = "unet3d_h100"  # a built-in, by name
    args = ["bench", "--root", str(tmp_path / "data"), "-q", "--dlio", dlio, "-w", "tokens"]
    assert main([*args, *listing, "--scale", "0.01", "--steps", "1", "--trials", "1"]) == 2
    err = capsys.readouterr().err
    assert f"got -w tokens and --dlio {dlio!r}: a run reads a --dlio YAML or -w" in err
    assert not (tmp_path / "data").exists()


def _files_toml(tmp_path: Path, variants: str) -> Path:
    path = tmp_path / "w.toml"
    path.write_text(
        f'name = "w"\nkind = "files"\nvariants = [{variants}]\n[dataset]\nformat = "npz"\n'
        f"files = 8\nrecord_bytes = 300\n{_TRAIN}"
    )
    return path


@pytest.mark.parametrize(
    ("variants", "extra", "expected"),
    [
        ('"headrace", "headrace"', [], "w.toml: variant 'headrace' is listed more than once"),
        ('"headrace"', ["--variants", "ceiling,ceiling"], "variant 'ceiling' is listed more"),
        ('"headrace"', ["--sweep", "in_flight=2,2"], "value '2' is given more than once"),
    ],
)
def test_a_variant_twice_is_refused_before_the_dataset(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    variants: str,
    extra: list[str],
    expected: str,
) -> None:
    # The runner keys its streams by spec: a variant listed twice generated the dataset,
    # then ended in a StopIteration traceback (fails before: raises StopIteration).
    path = _files_toml(tmp_path, variants)
    root = tmp_path / "d"
    assert main(["bench", "-w", str(path), "--root", str(root), "-q", *extra]) == 2
    assert expected in capsys.readouterr().err
    assert not root.exists()


def test_an_option_over_a_reader_default_of_none_is_read_as_a_number(tmp_path: Path) -> None:
    # The files kind's in_flight defaults to None (the kind decides): a file that leaves it
    # out had ?in_flight=2 (and --sweep in_flight=2,4) refused as "in_flight must be a whole
    # number >= 1; got '2'" (fails before: exit 2), though the docs sweep it.
    path = _files_toml(tmp_path, '"headrace"')
    out = tmp_path / "r.json"
    args = ["bench", "-w", str(path), "--root", str(tmp_path / "d"), "-q", "--no-isolate"]
    # (a space after the comma is no part of a value: the spec read "in_flight= 4")
    assert main([*args, "--sweep", "in_flight=2, 4", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert [(r["variant"], r["in_flight"]) for r in results] == [
        ("headrace?in_flight=2", 2),
        ("headrace?in_flight=4", 4),
    ]
    assert len({r["digest"] for r in results}) == 1


@pytest.mark.parametrize("name", ["../../up", "a/b", ".."])
def test_a_workload_name_that_is_a_path_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    # The name begins a files dataset's folder: name = "../../up" wrote the dataset two
    # folders above --root (fails before: exit 0, tmp_path/../up-npz-8x1-... written).
    path = _files_toml(tmp_path, '"headrace"')
    path.write_text(path.read_text().replace('name = "w"', f"name = {name!r}".replace("'", '"')))
    root = tmp_path / "a" / "b" / "root"
    assert main(["bench", "-w", str(path), "--root", str(root), "-q", "--no-isolate"]) == 2
    assert f"name {name!r} cannot be a path" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.toml"]


@pytest.mark.parametrize(
    ("fmt", "extra"),
    [("hdf5", "samples_per_file = 3\nrecord_bytes = 100\n"), ("png", "image_hw = [64, 64]\n")],
)
def test_the_demand_printed_before_the_dataset_is_the_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, extra: str
) -> None:
    # Before the files existed, the demand was worked out from the record size alone: an
    # HDF5 file of 3 records of 100 B stores ~2.7 kB (labels, container), and a PNG was
    # record_bytes' 300 kB guess. The first run printed one demand, its JSON and later runs
    # another (fails before: 'batch 4 x 100 B/record ... = 400.0 kB/s', the JSON's 1.4 MB/s).
    from headrace._messages import byte_size

    text = (
        f'name = "w"\nkind = "files"\nvariants = ["headrace"]\n[dataset]\nformat = "{fmt}"\n'
        f"files = 4\n{extra}{_TRAIN}"
    )
    lines = []
    for _ in range(2):  # generated by the first run, read by the second
        demand = bench_file(tmp_path, text)["workloads"][0]["demand_bytes_per_s"]
        line = next(x for x in capsys.readouterr().err.splitlines() if "per accelerator" in x)
        assert f"= {byte_size(demand)}/s per accelerator" in line
        lines.append(line)
    assert lines[0] == lines[1]


def test_max_accelerators_of_one_step_trials_is_searched_not_taken_as_0(tmp_path: Path) -> None:
    # Trials of one step count no step (AU 0 by definition), and the search started from
    # that "verdict": every variant of the documented `--dlio unet3d_h100.yaml --scale 0.05
    # --accelerators auto` (epochs of 1 step) showed max acc. 0 (fails before: 0 here, for
    # a loader of 300 B records beside 50 ms of compute).
    report = bench_file(
        tmp_path,
        'name = "w"\nkind = "files"\nvariants = ["headrace"]\n[dataset]\nformat = "npz"\n'
        "files = 8\nrecord_bytes = 300\n[train]\nbatch_size = 4\ncomputation_time = 0.05\n",
        *("--steps", "1", "--trials", "1", "--accelerators", "auto"),
    )
    (r,) = report["results"]
    assert r["au"] == 0 and r["max_accelerators"] >= 1
    assert any(
        "max acc. was searched on epochs of 5 steps of its own" in n for n in report["notes"]
    )


def test_a_reader_that_fetched_less_than_it_delivered_is_said_to_read_its_memory(
    tmp_path: Path,
) -> None:
    # 8 files in a window of 8 fetches: one fetch serves samples of several epochs, so
    # headrace's GB/s (and AU) were partly its own memory's, beside a map-style that read
    # every byte, and nothing said so (fails before: no such note).
    report = bench_file(
        tmp_path,
        'name = "w"\nkind = "files"\nvariants = ["map-style", "headrace"]\n[dataset]\n'
        'format = "npz"\nfiles = 8\nrecord_bytes = 300\n[reader]\nin_flight = 8\n'
        "[train]\nbatch_size = 4\nsteps = 12\ntrials = 1\nwarmup_steps = 1\n",
    )
    amp = {r["variant"]: r["amplification"] for r in report["results"]}
    assert amp["headrace"] < 0.95 <= amp["map-style"]
    said = [n for n in report["notes"] if "of the bytes it delivered" in n]
    assert said == [
        f"w/headrace: fetched {amp['headrace']:.2f} of the bytes it delivered: the dataset "
        "fits in its read-ahead window, so one fetch served samples of several epochs, and "
        "its GB/s is partly its memory's, not the storage's; a dataset several times "
        "the window (more files: --scale, --files) reads as training does"
    ]
    # With compute, its AU too (without, the note named an AU the table showed as "-").
    from headrace.bench._result_notes import result_notes

    (r,) = [r for r in report["results"] if r["variant"] == "headrace"]
    (note,) = result_notes("w", [{**r, "au": 0.97}])
    assert "its GB/s and AU are partly its memory's" in note


@pytest.mark.parametrize("stop", [KeyboardInterrupt, "sigterm"])
def test_an_interrupted_run_keeps_the_workloads_it_measured(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    stop: object,
) -> None:
    # Ctrl-C (or SIGTERM) in the second workload of `-w a -w b -w c --json r.json` lost the
    # first: nothing was printed or written (fails before: no r.json, exit 130).
    import headrace.bench._cli as bc
    from headrace.cli import _Terminated

    real = bc.run_workload
    calls: list[str] = []
    at = [2]

    def run_workload(kind: Any, **kw: Any) -> Any:
        calls.append(kind.workload.name)
        if len(calls) == at[0]:  # fault injection: the interrupt, in the second workload
            raise KeyboardInterrupt if stop is KeyboardInterrupt else _Terminated(143)
        return real(kind, **kw)

    monkeypatch.setattr(bc, "run_workload", run_workload)
    path = _files_toml(tmp_path, '"headrace"')
    out = tmp_path / "r.json"
    args = ["bench", "--root", str(tmp_path / "d"), *TINY, "--no-isolate", "--json", str(out)]
    rc = main([*args, "-w", "tokens", "-w", str(path), "-w", "padded"])
    assert rc == (130 if stop is KeyboardInterrupt else 143)
    assert calls == ["tokens", "w"]
    report = json.loads(out.read_text())
    jsonschema.validate(report, schema())
    assert {r["workload"] for r in report["results"]} == {"tokens"}
    how = "Ctrl-C" if stop is KeyboardInterrupt else "SIGTERM"
    assert f"interrupted ({how}): not measured: w, padded" in report["notes"]
    assert "tokens" in capsys.readouterr().out  # the table of what was measured
    # In the first workload: nothing to report, and it says so (a bare "interrupted" was all).
    calls.clear()
    at[0] = 1
    out.unlink()
    rc = main([*args, "-w", str(path), "-w", "tokens"])
    assert rc == (130 if stop is KeyboardInterrupt else 143)
    assert calls == ["w"] and not out.exists()
    err = capsys.readouterr().err
    assert f"headrace bench: interrupted ({how}) after " in err
    assert "s: not measured: w, tokens (a variant's figures come once its measurement" in err
    assert f"; no report written to {out}\n" in err


@pytest.mark.parametrize(
    ("given", "expected"),
    [("", "--variants '': name at least one variant"), (",", "--variants ',': name at least")],
)
def test_variants_that_name_none_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str, expected: str
) -> None:
    # --variants "" ran every variant, and "," blamed tokens.toml ("the variants list is
    # empty") for what the command line said (fails before: exit 0; another message).
    root = tmp_path / "d"
    assert main(["bench", "--root", str(root), "-q", "--variants", given]) == 2
    assert expected in capsys.readouterr().err
    assert not root.exists()


def test_variants_with_spaces_after_the_commas_are_read(tmp_path: Path) -> None:
    # "naive, headrace-sync" was refused: unknown variant ' headrace-sync' (fails before).
    rc, report = bench(tmp_path, "--variants", "naive, headrace-sync", "--no-isolate")
    assert rc == 0
    assert [r["variant"] for r in report["results"]] == ["naive", "headrace-sync"]


def test_a_workload_named_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `-w tokens -w tokens` ran it twice, into rows (and `bench compare` keys) no one could
    # tell apart; a file whose name = "tokens" beside the built-in likewise (fails before:
    # exit 0).
    root = tmp_path / "d"
    assert main(["bench", "--root", str(root), "-q", "-w", "tokens", "-w", "tokens"]) == 2
    assert "workload 'tokens' is named more than once (-w tokens -w tokens)" in (
        capsys.readouterr().err
    )
    path = _files_toml(tmp_path, '"headrace"')
    path.write_text(path.read_text().replace('name = "w"', 'name = "tokens"'))
    assert main(["bench", "--root", str(root), "-q", "-w", "tokens", "-w", str(path)]) == 2
    assert "workload 'tokens' is named more than once" in capsys.readouterr().err
    assert not root.exists()


def test_json_and_plot_to_one_file_are_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--json r.png --plot r.png`: the plot was written over the report after the run, and
    # the JSON was lost without a word (fails before: exit 0, r.png a PNG).
    out = tmp_path / "r.png"
    (tmp_path / "sub").mkdir()
    for plot in (str(out), str(tmp_path / "sub" / ".." / "r.png")):
        args = ["bench", "--root", str(tmp_path / "d"), *TINY, "--json", str(out)]
        assert main([*args, "--plot", plot]) == 2
        assert "are the same file: the plot would replace the report" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "d").exists()


def test_a_report_over_the_workload_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `-w w.toml --json w.toml` (or --dlio d.yaml --json d.yaml) wrote the report over the
    # workload the user wrote (fails before: exit 0, w.toml a JSON report).
    path = _files_toml(tmp_path, '"headrace"')
    before = path.read_text()
    yaml = tmp_path / "d.yaml"
    yaml.write_text("dataset: {format: npz, num_files_train: 4, record_length_bytes: 100}\n")
    root = str(tmp_path / "d")
    for given, src in ((["-w", str(path)], path), (["--dlio", str(yaml)], yaml)):
        assert main(["bench", *given, "--root", root, "-q", "--json", str(src)]) == 2
        assert f"--json {str(src)!r} is a file of the data read" in capsys.readouterr().err
    assert path.read_text() == before and yaml.read_text().startswith("dataset:")
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    ("command", "workload", "expected"),
    [
        (["bench"], "table", "workload 'table' (kind 'tables') needs pyarrow, which is not"),
        (["gen"], "packed", "workload 'packed' (kind 'packed') needs pyarrow, which is not"),
        (["bench"], "parquet", "workload 'parquet' (kind 'parquet') needs pyarrow, which is"),
        (["bench"], "hub-images", "needs pyarrow and PIL, which are not installed: pip install "),
    ],
)
def test_a_workload_whose_extra_is_missing_names_the_pip_install(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    workload: str,
    expected: str,
) -> None:
    # Fault injection: the extras made unimportable, as on a NumPy-only install. `headrace
    # bench -w table` printed its plan, then failed in the dataset generator with a
    # traceback ending "No module named 'pyarrow'"; --list called it runnable.
    for module in ("pyarrow", "PIL"):
        monkeypatch.setitem(sys.modules, module, None)
    root = tmp_path / "data"
    assert (
        main(
            [*command, workload, "--root", str(root)]
            if command == ["gen"]
            else [*command, "-w", workload, "--root", str(root), "-q"]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert expected in err and "pip install 'headrace[arrow" in err, err
    assert "Traceback" not in err and not root.exists()
    assert main(["bench", "--list", "--root", str(root)]) == 0
    listed = capsys.readouterr().out
    assert f"not runnable yet: {workload}.toml: workload {workload!r}" in listed, listed


def test_compare_says_first_when_the_reports_ran_other_storage_machines_or_trials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A local run against one on S3 at 20 ms printed "0.02x  same" and nothing else: a
    # loader's regression to a reader who had not made both runs (fails before: no note).
    from headrace.bench._machine import machine_info

    def report(path: Path, rate: float, storage: dict[str, Any], machine: dict[str, Any]) -> str:
        row = {"workload": "jpeg", "variant": "headrace", "batches_per_s": rate, "digest": "d"}
        wl = {"kind": "files", "dataset": {"files": 64}, "train": {"steps": 4, "trials": 2}}
        w = {"name": "jpeg", "workload": wl, **storage}
        path.write_text(json.dumps({"workloads": [w], "results": [row], "machine": machine}))
        return str(path)

    here = machine_info(str(tmp_path))
    local = {"storage": "local"}
    s3 = {"storage": "s3", "s3": {"url": "s3://b/p", "latency_ms": 20.0}}
    a = report(tmp_path / "a.json", 100.0, local, here)
    b = report(tmp_path / "b.json", 2.0, s3, here)
    assert main(["bench", "compare", a, b]) == 0
    lines = capsys.readouterr().out.splitlines()
    fs = here["storage"]["fstype"]
    assert lines[0] == (
        f"note: jpeg: the reports read other storage (A: local disk ({fs}); B: S3, 20 ms "
        "added to each request): B/A compares the storage too, not the loader alone"
    )
    assert lines[1].startswith("workload ") and "0.02x  same" in lines[2]
    # Another machine, and trials of other lengths: said too; the same of both: nothing.
    other = {**here, "cores_usable": here["cores_usable"] + 2}
    b = report(tmp_path / "b.json", 2.0, local, other)
    Path(b).write_text(Path(b).read_text().replace('"steps": 4', '"steps": 256'))
    assert main(["bench", "compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "note: the reports ran on other machines (A: " in out
    assert f"{here['cores_usable'] + 2} cores" in out and "B/A compares them too" in out
    assert (
        "note: jpeg: the reports ran 2 trials of 4 steps (A) and 2 trials of 256 steps (B)" in out
    )
    assert main(["bench", "compare", a, a]) == 0
    assert "note:" not in capsys.readouterr().out


def test_json_dash_writes_the_report_to_stdout_and_the_tables_to_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--json - | jq` read the tables, and the report went to a file named '-'.
    monkeypatch.chdir(tmp_path)
    args = ["bench", "--root", str(tmp_path / "d"), *TINY, "--no-isolate", "--json", "-"]
    assert main([*args, "--variants", "naive,headrace-async"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    jsonschema.validate(report, schema())
    assert [r["variant"] for r in report["results"]] == ["naive", "headrace-async"]
    assert "headrace bench (GB = 10^9 B" in captured.err
    assert not (tmp_path / "-").exists()
