"""Figures a storage engineer reads off a bench report, checked against their definitions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _bench_run import result_row

from headrace.bench._files_kind import FilesKind
from headrace.bench._kind import GenStream, VariantSpec, make_kind
from headrace.bench._runner import RunOptions, run_workload
from headrace.bench._workload import builtin_workloads
from headrace.cli import main


def test_an_order_free_variant_that_delivers_fewer_steps_is_a_mismatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 8 files in batches of 4: the measurement pass asks for whole epochs (4 steps), so
    # iterable is compared by its canonical digest. One that delivered a step less was
    # taken for a run "not covering whole epochs" (a note, not compared, exit 0): the
    # check read the steps the variant delivered, not the steps the run asked of it.
    wl = builtin_workloads()["npz"].replace(
        dataset={"files": 8, "record_bytes": 1_000},
        train={"steps": 2, "trials": 1, "warmup_steps": 1, "batch_size": 4},
        variants=("headrace", "iterable"),
    )
    kind = make_kind(wl, str(tmp_path))
    assert isinstance(kind, FilesKind)
    kind.generate()
    asked = kind.digest_steps(3)
    assert asked == 4 and kind.canonical_comparable(asked)
    whole = FilesKind.openers["iterable"]

    def short(k: FilesKind, spec: VariantSpec, steps: int) -> Any:
        stream = whole(k, spec, steps)
        if steps != asked:
            return stream
        it = iter(stream)

        def fewer() -> Iterator[Any]:
            for _ in range(steps - 1):
                yield next(it)

        return GenStream(fewer(), stream.bytes_read, stream.close, stream.stats)

    monkeypatch.setitem(FilesKind.openers, "iterable", short)
    summary, results = run_workload(kind, options=RunOptions(isolate=False, warm_cache=False))
    by = {r["variant"]: r for r in results}
    assert by["iterable"]["steps"] == asked - 1
    assert by["iterable"]["must_agree"] is True
    assert by["iterable"]["digest_compared"] == "canonical"
    assert summary["mismatches"] == [["headrace"], ["iterable"]]


def _au_report(path: Path, au: float, *, accelerators: int = 1, compute: float = 0.005) -> str:
    train = {"batch_size": 8, "seed": 0, "world_size": 1, "rank": 0, "steps": 64, "trials": 3}
    train |= {"computation_time": compute, "computation_time_stdev": 0.0, "au_threshold": 0.9}
    w = {"name": "u", "workload": {"kind": "files", "dataset": {}, "train": train}}
    w["accelerators"] = accelerators
    row = {"workload": "u", "variant": "headrace", "batches_per_s": 50.0, "digest": "d"}
    row |= {"au": au, "au_pass": au >= 0.9, "steps": 64}
    path.write_text(json.dumps({"workloads": [w], "results": [row]}))
    return str(path)


@pytest.mark.parametrize(
    ("b", "said"),
    [
        (
            {"accelerators": 8},
            "note: u: the reports simulated other compute (A: 1 accelerator, 5 ms a step; "
            "B: 8 accelerators, 5 ms a step): their AU compares that too, not the storage alone",
        ),
        (
            {"compute": 0.05},
            "note: u: the reports simulated other compute (A: 1 accelerator, 5 ms a step; "
            "B: 1 accelerator, 50 ms a step): their AU compares that too, not the storage alone",
        ),
    ],
)
def test_compare_says_when_the_reports_simulated_other_compute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], b: dict[str, Any], said: str
) -> None:
    # AU 0.96 ok at 1 accelerator beside 0.31 FAIL at 8 (or at a tenth of the compute)
    # read as the storage's regression: compare named the data, plan, storage, machine and
    # trials that differed, not the compute the AU columns are measured against.
    a = _au_report(tmp_path / "a.json", 0.96)
    other = _au_report(tmp_path / "b.json", 0.31, **b)
    assert main(["bench", "compare", a, other]) == 0
    out = capsys.readouterr().out
    assert said in out, out
    assert main(["bench", "compare", a, a]) == 0
    assert "note:" not in capsys.readouterr().out


def _row(au: float, passed: bool, workload: str = "u") -> dict[str, Any]:
    return result_row(workload, au=au, au_pass=passed)


@pytest.mark.parametrize(
    ("au", "passed", "threshold", "cell"),
    [
        (0.8996, False, 0.9, "0.8996 FAIL"),  # was "0.90 FAIL": the threshold, failing
        (0.89996, False, 0.9, "0.89996 FAIL"),
        (0.8996, True, 0.8996, "0.90 ok"),
        (0.9049, False, 0.905, "0.90 FAIL"),
        (0.95, True, 0.9, "0.95 ok"),
        (0.79, False, 0.9, "0.79 FAIL"),
    ],
)
def test_the_au_cell_never_reads_as_the_other_side_of_its_threshold(
    au: float, passed: bool, threshold: float, cell: str
) -> None:
    from headrace.bench._report import au_text, format_table

    assert au_text(au, passed, threshold) == cell.split()[0]
    workloads = [{"name": "u", "au_threshold": threshold}]
    report = {"results": [_row(au, passed)], "workloads": workloads}
    assert f"| {cell} |" in format_table(report)


def test_compare_shows_an_au_that_fails_its_threshold_below_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _au_report(tmp_path / "a.json", 0.95)
    b = _au_report(tmp_path / "b.json", 0.8996)
    for path in (a, b):  # the threshold, as a run writes it beside the workload
        report = json.loads(Path(path).read_text())
        report["workloads"][0]["au_threshold"] = 0.9
        Path(path).write_text(json.dumps(report))
    assert main(["bench", "compare", a, b]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert "0.95 ok" in row and "0.8996 FAIL" in row and "0.90 FAIL" not in row


def test_a_loader_without_a_read_ahead_thread_still_starts_short_trials_with_batches(
    tmp_path: Path,
) -> None:
    # headrace-sync (prefetch=0) gathers chunks of up to 32 steps at a chunk's first
    # batch, so a trial of 6 steps could find every batch gathered in the one before it:
    # 1,304,916 batches/s at most beside a median of 13,935, unmarked ("read_ahead":
    # false, said to start each trial from nothing). One step a chunk gathers none ahead.
    wl = builtin_workloads()["tokens"].replace(
        dataset={"token_file_gib": 0.002, "context": 64},
        train={"steps": 6, "trials": 2, "warmup_steps": 2, "batch_size": 4},
        variants=("naive", "headrace-sync", "headrace-sync?chunk_steps=1"),
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    _, results = run_workload(kind, options=RunOptions(isolate=False, warm_cache=False))
    by = {r["variant"]: r for r in results}
    assert by["headrace-sync"]["read_ahead"] is True
    assert by["headrace-sync"]["table"]["short_trials"] is True
    for plain in ("naive", "headrace-sync?chunk_steps=1"):
        assert by[plain]["read_ahead"] is False
        assert by[plain]["table"]["short_trials"] is False


def test_a_sweep_plot_of_two_workloads_draws_a_line_for_each() -> None:
    # `-w tokens -w megatron --sweep block_mib=1,4`: both workloads' headrace-sync were
    # one line with two points at each value (a line per variant name alone).
    from headrace.bench._plot import sweep_lines

    results = [
        {**_row(0.95, True, workload=w), "variant": f"headrace-sync?block_mib={v}"}
        for w in ("tokens", "megatron")
        for v in (1, 4)
    ]
    lines = sweep_lines(results, "block_mib")
    assert sorted(lines) == ["megatron/headrace-sync", "tokens/headrace-sync"]
    assert [v for v, _ in lines["tokens/headrace-sync"]] == ["1", "4"]
    # Marked as the table marks them: the short trials of one workload alone.
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from headrace.bench._plot import draw_report

    for r in results:
        r["steps_per_trial"] = 20 if r["workload"] == "tokens" else 1000
    fig = draw_report({"results": results, "workloads": []}, sweep="block_mib=1,4")
    try:
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    finally:
        plt.close(fig)
    assert legend == ["tokens/headrace-sync*", "megatron/headrace-sync"]


def test_the_au_panel_draws_the_results_with_an_au_against_their_own_threshold() -> None:
    # A workload without compute ("-" in the table's AU column) was drawn at AU 0, and the
    # line was the lowest threshold of every workload (0.90 of the one without compute,
    # under bars judged at 0.95).
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from headrace.bench._plot import draw_report

    results = [_row(0.93, False, workload="u"), {**_row(0.0, False, workload="t"), "au": None}]
    workloads = [{"name": "u", "au_threshold": 0.95}, {"name": "t", "au_threshold": 0.9}]
    fig = draw_report({"results": results, "workloads": workloads})
    try:
        ax = fig.axes[1]
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        lines = [list(line.get_ydata()) for line in ax.get_lines()]
    finally:
        plt.close(fig)
    assert ticks == ["u\nheadrace"]
    assert lines == [[0.95, 0.95]]


def test_the_short_trials_note_is_given_only_where_a_variant_reads_ahead(
    tmp_path: Path,
) -> None:
    # `--variants naive,memcpy --steps 4`: nothing starred, naive judged against the
    # ceiling, and a note said the trials overstate a loader and their GB/s were not judged.
    wl = builtin_workloads()["tokens"].replace(
        dataset={"token_file_gib": 0.002, "context": 64},
        train={"steps": 4, "trials": 2, "warmup_steps": 1, "batch_size": 4},
        variants=("naive", "memcpy"),
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    summary, results = run_workload(kind, options=RunOptions(isolate=False, warm_cache=False))
    assert not any(r["table"]["short_trials"] for r in results)
    assert not [n for n in summary["notes"] if "short beside a read-ahead queue" in n]
