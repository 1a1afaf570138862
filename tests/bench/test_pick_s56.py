"""The report says which variant to pick, and why, in one line a workload: the fastest of
those whose bytes were checked equal (by AU first where there is compute), its ratio to
the baseline from the table's own figures, and whether the runner-up is told apart.

Until 2026-12-07 a person had to work it out from the columns (and from the digests, to
leave out memcpy, ceiling and the raw variants, which deliver other bytes)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from _bench_run import bench_file, result_row

from headrace.bench._report import print_report, table_figures


def _row(variant: str, rate: float, lo: float, hi: float, **more: Any) -> dict[str, Any]:
    spread = {"min": lo, "max": hi, "median": rate}
    fields: dict[str, Any] = {
        "variant": variant,
        "batches_per_s": rate,
        "batches_per_s_spread": spread,
        "au": None,
        "au_pass": None,
        "digest_group": "",
        "must_agree": True,
        "baseline_variant": "naive",
        "ratio_to_baseline": rate / 100.0,
        "trials": 5,
    }
    return result_row("w", **{**fields, **more})


def _report(*rows: dict[str, Any], mismatches: list[list[str]] | None = None) -> dict[str, Any]:
    wl = {"name": "w", "au_threshold": 0.9, "mismatches": mismatches or [], "failed": []}
    return {"schema": "headrace.bench/1", "sweep": None, "workloads": [wl], "results": list(rows)}


def _picks(report: dict[str, Any]) -> list[str]:
    out = io.StringIO()
    print_report(report, file=out)
    return [line for line in out.getvalue().splitlines() if line.startswith("pick: ")]


def test_the_fastest_of_the_variants_that_agree_is_picked_with_its_ratio() -> None:
    report = _report(
        _row("naive", 100.0, 90.0, 110.0),
        _row("headrace", 1000.0, 900.0, 1100.0),
        _row("slow", 500.0, 450.0, 550.0),
        # Faster, but not a loader of the same bytes: never picked.
        _row("memcpy", 5000.0, 4000.0, 6000.0, digest=None, must_agree=False),
        _row("headrace-raw", 3000.0, 2900.0, 3100.0, digest_group="raw"),
    )
    (line,) = _picks(report)
    assert line.startswith("pick: w: headrace, ")
    assert "10.00x naive" in line and "1,000 vs 100 batches/s" in line
    assert "median of 5 trials" in line
    # The runner-up's spread lies below the pick's: told apart.
    assert "slow" in line and "told apart" in line and "not told apart" not in line
    assert "memcpy" not in line and "headrace-raw" not in line


def test_a_runner_up_within_the_spread_is_said_not_told_apart() -> None:
    report = _report(
        _row("naive", 100.0, 90.0, 110.0),
        _row("headrace-sync", 1000.0, 700.0, 1300.0),
        _row("headrace-async", 950.0, 600.0, 1200.0),
    )
    (line,) = _picks(report)
    assert line.startswith("pick: w: headrace-sync, ")
    assert "headrace-async" in line and "not told apart" in line


def test_with_compute_au_decides_before_throughput() -> None:
    report = _report(
        _row("naive", 100.0, 90.0, 110.0, au=0.5, au_pass=False),
        _row("fast", 2000.0, 1900.0, 2100.0, au=0.8, au_pass=False),
        _row("headrace", 1000.0, 900.0, 1100.0, au=0.97, au_pass=True),
    )
    (line,) = _picks(report)
    assert line.startswith("pick: w: headrace, ")
    assert "AU 0.97 >= 0.90" in line and "fast 0.80" in line


def test_none_at_the_threshold_is_said_so() -> None:
    report = _report(
        _row("naive", 100.0, 90.0, 110.0, au=0.5, au_pass=False),
        _row("headrace", 1000.0, 900.0, 1100.0, au=0.8, au_pass=False),
    )
    (line,) = _picks(report)
    assert "none of the variants that delivered the same bytes keeps AU >= 0.90" in line
    assert "closest: headrace 0.80; naive 0.50" in line


def test_no_pick_where_digests_differ() -> None:
    report = _report(
        _row("naive", 100.0, 90.0, 110.0),
        _row("headrace", 1000.0, 900.0, 1100.0, digest="cd" * 32),
        mismatches=[["naive"], ["headrace"]],
    )
    (line,) = _picks(report)
    assert line.startswith("pick: w: none: ") and "differ" in line


def test_a_run_prints_a_pick_that_matches_its_table(tmp_path: Path) -> None:
    report = bench_file(
        tmp_path,
        'name = "w"\nkind = "tokens"\nvariants = ["naive", "headrace-sync", "memcpy"]\n'
        "[dataset]\ntoken_file_gib = 0.001\ncontext = 64\n"
        "[reader]\nwindow_mib = 1\nblock_mib = 0.0625\n"
        "[train]\nbatch_size = 4\nsteps = 8\ntrials = 3\nwarmup_steps = 1\n",
    )
    (line,) = _picks(report)
    agree = [r for r in report["results"] if r["variant"] != "memcpy"]
    best = max(agree, key=lambda r: table_figures(r)["batches_per_s"])
    assert line.startswith(f"pick: w: {best['variant']}, ")
    if best["variant"] == "naive":  # a tiny run on a busy machine: either may win
        assert "the baseline" in line
    else:
        assert f"{best['ratio_to_baseline']:.2f}x naive" in line
    assert "memcpy" not in line


def test_with_accelerators_auto_the_most_kept_decides() -> None:
    report = _report(
        _row("naive", 100.0, 90.0, 110.0, au=0.95, au_pass=True, max_accelerators=2),
        _row("fast", 2000.0, 1900.0, 2100.0, au=0.99, au_pass=True, max_accelerators=4),
        _row("headrace", 1000.0, 900.0, 1100.0, au=0.97, au_pass=True, max_accelerators=4096),
    )
    (line,) = _picks(report)
    assert line.startswith("pick: w: headrace, AU 0.97 >= 0.90, keeps 4,096+ accelerators")


def test_one_trial_each_is_not_told_apart() -> None:
    # One timing has no spread: 3.78 against 6.26 of one trial each was "told apart".
    report = _report(
        _row("naive", 100.0, 100.0, 100.0, trials=1),
        _row("headrace", 1000.0, 1000.0, 1000.0, trials=1),
    )
    (line,) = _picks(report)
    assert "1,000 vs 100 batches/s, 1 trial)" in line
    assert "one timing each, not told apart" in line and "its spread lies below" not in line
