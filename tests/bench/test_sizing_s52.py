"""How many accelerators a storage keeps busy: the question a storage engineer runs the
bench for, answered in a line a reader can check by hand (session 52)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import jsonschema
from _bench_run import bench_file, schema

from headrace._messages import byte_size
from headrace.bench._kind import make_kind
from headrace.bench._result_notes import accelerators_note, result_notes
from headrace.bench._runner import RunOptions, run_workload
from headrace.bench._workload import builtin_workloads


def _rows(**acc: int | None) -> list[dict[str, object]]:
    return [
        {"variant": v, "au": 0.5, "au_pass": False, "max_accelerators": n} for v, n in acc.items()
    ]


def test_the_storage_ceiling_is_turned_into_accelerators_with_its_sum_shown() -> None:
    # The slowfs UNet3D run of 2026-12-07: every variant "max acc. 0", and nothing said how
    # far short the storage was (0.1 of one accelerator, or 0.9?).
    note = accelerators_note(
        "unet3d",
        _rows(headrace=0, **{"headrace-raw": 0}),
        demand=2.89e9,
        threshold=0.9,
        ceiling_gbps=0.28,
        stored_per_payload=1.0,
        accelerators=1,
        auto=True,
        cpus=2,
    )
    assert note is not None
    assert note.startswith("unet3d: accelerators at AU >= 0.90: each asks 2.89 GB/s")
    assert "read ceiling from this host, 280.0 MB/s, is 0.097 of one accelerator's demand" in note
    assert "it keeps 0 at AU >= 0.90 (280.0 MB/s / (0.90 x 2.89 GB/s) = 0.11)" in note
    assert "this host's 2 CPUs kept at AU >= 0.90 (max acc.): headrace 0, headrace-raw 0" in note


def test_a_ceiling_of_several_accelerators_rounds_down() -> None:
    # 0.99 GB/s over ResNet-50's 204.8 MB/s: 4.83 accelerators' demand, 5.37 at AU 0.90: 5.
    note = accelerators_note(
        "resnet50",
        _rows(headrace=1),
        demand=204.8e6,
        threshold=0.9,
        ceiling_gbps=0.99,
        stored_per_payload=1.0,
        accelerators=1,
        auto=True,
        cpus=2,
    )
    assert note is not None
    assert "is 4.83 of one accelerator's demand: it keeps 5 at AU >= 0.90" in note
    assert "(990.0 MB/s / (0.90 x 204.8 MB/s) = 5.37)" in note


def test_without_a_search_it_names_the_verdicts_at_the_runs_count_and_the_flag() -> None:
    rows = _rows(naive=None, headrace=None)
    rows[1]["au_pass"] = True
    note = accelerators_note(
        "w",
        rows,
        demand=1e9,
        threshold=0.9,
        ceiling_gbps=None,
        stored_per_payload=1.0,
        accelerators=4,
        auto=False,
        cpus=2,
    )
    assert note is not None
    assert "no read ceiling of the storage was measured" in note
    assert "at 4 simulated accelerators on this host's 2 CPUs, AU >= 0.90: headrace" in note
    assert "--accelerators auto finds how many each variant keeps" in note


def test_no_compute_no_note() -> None:
    args = {"threshold": 0.9, "ceiling_gbps": 1.0, "stored_per_payload": 1.0}
    assert (
        accelerators_note(
            "w", _rows(a=None), demand=None, accelerators=1, auto=False, cpus=2, **args
        )
        is None
    )


def test_a_run_with_compute_says_how_many_accelerators_its_storage_keeps(
    tmp_path: Path,
) -> None:
    # Real files, a real run: the note's demand is batch x record / compute as worked out
    # by hand, and its count is the ceiling's, in the run's own report.
    wl = builtin_workloads()["npz"].replace(
        dataset={"files": 4, "record_bytes": 100_000},
        train={
            "steps": 3,
            "trials": 1,
            "warmup_steps": 1,
            "batch_size": 2,
            "computation_time": 0.01,
        },
        variants=("headrace",),
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    summary, results = run_workload(
        kind, options=RunOptions(isolate=False, warm_cache=False, accelerators_auto=True)
    )
    said = [n for n in summary["notes"] if "accelerators at AU >=" in n]
    assert len(said) == 1, summary["notes"]
    by_hand = 2 * summary["record_bytes"] / 0.01
    assert said[0].startswith(f"npz: accelerators at AU >= 0.90: each asks {byte_size(by_hand)}/s")
    assert f"headrace {results[0]['max_accelerators']:,}" in said[0]
    ceiling = summary["storage_ceiling"]["gb_per_s"]
    if ceiling is not None:  # not on tmpfs
        keeps = math.floor(ceiling * 1e9 / (0.9 * by_hand))
        assert f"it keeps {keeps:,} at AU >= 0.90" in said[0]


def test_a_demand_from_drawn_record_sizes_says_the_workloads_own() -> None:
    # UNet3D's 42 files at --scale 0.25 average 1.33 MB against the YAML's 1.47 MB: the
    # line said 2.89 GB/s where 7 x 1.47 MB / 3.23 ms, worked out from the YAML, is 3.18.
    note = accelerators_note(
        "unet3d",
        _rows(headrace=0),
        demand=7 * 1_332_178 / 0.00323,
        threshold=0.9,
        ceiling_gbps=None,
        stored_per_payload=1.0,
        accelerators=1,
        auto=True,
        cpus=2,
        drawn=(1_332_178.0, 1_466_006.0),
    )
    assert note is not None
    assert note.startswith(
        "unet3d: accelerators at AU >= 0.90: each asks 2.89 GB/s (its records are drawn with "
        "a stdev and average 1.3 MB here, the workload's mean 1.5 MB: 3.18 GB/s at that)"
    )


def test_each_trials_au_is_in_the_report_and_the_au_is_their_mean(tmp_path: Path) -> None:
    # The report gave the mean AU and the mean loader wait alone: 0.73 beside a wait that
    # worked out as busy / (busy + wait) to 0.66, with nothing to check it by, nor to see
    # that the five epochs were 0.47, 0.42, 0.96, 0.96 and 0.99.
    toml = """
name = "u"
kind = "files"
variants = ["map-style", "headrace"]
[dataset]
format = "npz"
files = 4
samples_per_file = 1
record_bytes = 10_000
[train]
batch_size = 2
steps = 3
trials = 3
warmup_steps = 1
computation_time = %s
"""
    report = bench_file(tmp_path, toml % "0.005")
    jsonschema.validate(report, schema())
    for r in report["results"]:
        trials = r["au_trials"]
        assert len(trials) == 3, r["variant"]
        assert all(0 <= a <= 1 for a in trials)
        assert r["au"] == statistics.fmean(trials)
    # Without compute there are none.
    report = bench_file(tmp_path, toml % "0.0")
    jsonschema.validate(report, schema())
    assert all(r["au_trials"] is None for r in report["results"])


def test_a_count_at_the_top_of_the_search_reads_as_a_bound_in_the_answer_too() -> None:
    note = accelerators_note(
        "w",
        _rows(headrace=4096),
        demand=1e3,
        threshold=0.9,
        ceiling_gbps=None,
        stored_per_payload=1.0,
        accelerators=1,
        auto=True,
        cpus=2,
    )
    assert note is not None and "(max acc.): headrace 4,096+:" in note


def _digest_row(variant: str, digest: str, canonical: str, compared: str) -> dict[str, object]:
    return {
        "variant": variant,
        "digest": digest * 32,
        "canonical_digest": canonical * 32,
        "digest_group": "raw",
        "digest_compared": compared,
        "must_agree": True,
    }


def test_a_digest_in_completion_order_that_differs_says_what_agreed() -> None:
    # Three UNet3D runs printed ceiling's sha256 as 33584b6780cc, f28dd1cb2cee and
    # 15192910a188 beside headrace-raw's 4537267a9619 each time, "compared canonical (raw)"
    # and no mismatch: a reader checking that the digests agree saw them differ.
    notes = result_notes(
        "unet3d",
        [
            _digest_row("headrace-raw", "45", "5f", "ordered"),
            _digest_row("ceiling", "33", "5f", "canonical"),
        ],
    )
    assert notes == [
        f"unet3d/ceiling: its sha256 ({'33' * 6}) is of its batches in the order it "
        "delivered them, another by design, which may change from run to run; by content "
        f"(each sample's digest, sorted: {'5f' * 6}) it is headrace-raw's, as the comparison "
        "checked"
    ]
    # The same digest in either order: nothing to explain.
    same = [
        _digest_row("headrace-raw", "45", "5f", "ordered"),
        _digest_row("ceiling", "45", "5f", "canonical"),
    ]
    assert result_notes("unet3d", same) == []


def test_a_ceiling_timed_on_a_few_megabytes_says_so() -> None:
    # ResNet-50 at --scale 0.002: the ceiling read the whole 2.9 MB dataset, and gave
    # 0.65 GB/s in one run and 0.057 in a later one, answers of 3 accelerators and of 0.
    def note(read: int) -> str:
        said = accelerators_note(
            "resnet50",
            _rows(headrace=None),
            demand=204.8e6,
            threshold=0.9,
            ceiling_gbps=0.0566,
            stored_per_payload=1.0,
            accelerators=1,
            auto=False,
            cpus=2,
            ceiling_bytes=read,
        )
        assert said is not None
        return said

    assert (
        "read ceiling from this host, 56.6 MB/s (a read of 2.9 MB, too little to time a "
        "storage well: a larger --scale or --files reads more), is 0.28 of one" in note(2_870_050)
    )
    assert "read ceiling from this host, 56.6 MB/s, is 0.28 of one" in note(256 << 20)
