"""Figures of a bench report a reader trusts: none stands for a measurement not made."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _bench_run import result_row

from headrace.bench._au import au_trial, max_accelerators
from headrace.bench._kind import Kind, make_kind
from headrace.bench._report import short_au_note
from headrace.bench._runner import RunOptions, run_workload
from headrace.bench._workload import builtin_workloads
from headrace.cli import main


def _npz(tmp_path: Path, **train: float) -> Kind:
    wl = builtin_workloads()["npz"].replace(
        dataset={"files": 4, "record_bytes": 1_000},
        train={"trials": 2, "warmup_steps": 1, "batch_size": 2, **train},
        variants=("map-style", "headrace"),
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    return kind


def test_a_trial_of_one_step_has_no_loader_time_per_counted_step() -> None:
    # The step AU leaves out is the only one: nothing was counted, and 0.0 s read as a
    # loader that kept the accelerator fed, beside AU 0 FAIL.
    au, load = au_trial(iter([{"x": np.zeros(1)}] * 3), 1, np.full(1, 0.001), 1)
    assert au == 0.0
    assert load is None
    au, load = au_trial(iter([{"x": np.zeros(1)}] * 3), 2, np.full(2, 0.001), 1)
    assert load is not None and load >= 0.0


def test_trials_of_one_step_report_no_loader_wait_with_compute(tmp_path: Path) -> None:
    kind = _npz(tmp_path, steps=1, computation_time=0.001)
    _, results = run_workload(kind, options=RunOptions(isolate=False, warm_cache=False))
    for r in results:
        assert r["au"] == 0.0 and r["au_pass"] is False
        assert r["loader_s_per_step_with_compute"] is None, r["variant"]


def test_the_accelerator_search_never_claims_a_count_past_the_most_it_tried(
    tmp_path: Path,
) -> None:
    # A variant that kept AU at the search's top count (4096) was bisected towards
    # twice that, never tried, and reported as 8191. Here the top is 4: 100 ms of
    # compute a step against microseconds of loading passes at every count tried.
    kind = _npz(tmp_path, steps=2, computation_time=0.1, au_threshold=0.3)
    assert max_accelerators(kind, "headrace", probe_steps=2, most=4) == 4
    # The run's own verdict at or past the top is the answer: nothing above it is tried.
    assert max_accelerators(kind, "headrace", probe_steps=2, known=(6, True), most=4) == 6


def test_a_max_acc_at_the_top_of_the_search_reads_as_a_bound() -> None:
    from headrace.bench._report import format_table

    table = format_table({"results": [result_row(max_accelerators=4096)]})
    assert "| 4,096+ |" in table
    table = format_table({"results": [result_row(max_accelerators=52)]})
    assert "| 52 |" in table


def test_compare_marks_an_au_of_trials_of_one_step_as_no_measurement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--steps 1` reports AU 0 by definition (nothing counted); compare printed it as
    # "0.00 FAIL" beside the other report's 0.78, read as the storage's gain.
    def report(path: Path, au: float, steps: int) -> str:
        row = {"workload": "u", "variant": "headrace", "batches_per_s": 5.0, "digest": "d"}
        row |= {"au": au, "au_pass": au >= 0.9, "steps_per_trial": steps}
        path.write_text(json.dumps({"results": [row]}))
        return str(path)

    a = report(tmp_path / "a.json", 0.0, 1)
    b = report(tmp_path / "b.json", 0.95, 1000)
    assert main(["bench", "compare", a, b]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[5:9] == ["0.00*", "FAIL", "0.95", "ok"], out
    assert out[2] == f"{short_au_note(1)} (A)"


def test_a_run_that_keeps_au_at_the_top_of_the_search_says_its_max_is_a_bound(
    tmp_path: Path,
) -> None:
    wl = builtin_workloads()["tokens"].replace(
        dataset={"token_file_gib": 0.002, "context": 16},
        train={
            "steps": 2,
            "trials": 1,
            "warmup_steps": 1,
            "batch_size": 1,
            # 0.5 s and 0.1 (0.2 s and 0.3 until 2026-12-07, which a CI run under load
            # missed): 4,096 batches of 16 tokens a step, whatever the machine's speed.
            "computation_time": 0.5,
            "au_threshold": 0.1,
        },
        variants=("headrace-sync",),
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    opts = RunOptions(isolate=False, warm_cache=False, accelerators=4096, accelerators_auto=True)
    summary, results = run_workload(kind, options=opts)
    assert results[0]["au_pass"] is True
    assert results[0]["max_accelerators"] == 4096
    said = [n for n in summary["notes"] if "the search tries" in n]
    assert said == [
        "tokens: kept AU at the most simulated accelerators the search tries (4,096, or the "
        "run's own --accelerators): headrace-sync at 4,096; their max acc. (the table's N+) "
        "is at least that"
    ]


def test_the_notes_under_the_table_name_each_length_of_short_trials(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Two workloads of 4 and 32 steps a trial: the note said "trials of 4 steps" of both.
    from headrace.bench._report import print_report, short_trials_note

    print_report({"results": [result_row("u", 4), result_row("v", 32)], "workloads": []})
    out = capsys.readouterr().out.splitlines()
    for steps in (4, 32):
        assert short_trials_note(steps) in out
        assert short_au_note(steps) in out


def test_the_plot_notes_name_each_length_of_short_trials() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from headrace.bench._plot import draw_report
    from headrace.bench._report import short_trials_note

    rows = [result_row("u", 4), result_row("v", 32)]
    fig = draw_report({"results": rows, "workloads": []})
    try:
        texts = [t.get_text() for t in fig.texts]
    finally:
        plt.close(fig)
    for steps in (4, 32):
        assert short_trials_note(steps, "GB/s") in texts
        assert short_au_note(steps) in texts


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_compare_refuses_a_report_with_a_figure_json_has_no_number_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], constant: str
) -> None:
    # Python's json reads NaN and Infinity, which JSON has not: compare printed "nan"
    # batches/s and a "nanx" ratio as figures.
    good = tmp_path / "a.json"
    good.write_text(
        json.dumps(
            {"results": [{"workload": "u", "variant": "v", "batches_per_s": 5.0, "digest": "d"}]}
        )
    )
    bad = tmp_path / "b.json"
    bad.write_text(good.read_text().replace("5.0", constant))
    assert main(["bench", "compare", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: not JSON" in err and constant in err, err
