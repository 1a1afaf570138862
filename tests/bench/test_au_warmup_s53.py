"""AU's warm-up epoch (s53): each fresh stream with compute runs one epoch before the
trials AU counts, reported as ``au_warmup`` and kept out of ``au`` and ``au_trials``. The
first epoch of a fresh stream was the lowest of a run's 5 in most DLIO UNet3D runs
(2026-12-07), and weighed a fifth of the mean."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
from _bench_run import bench_file, schema

from headrace.bench import _au
from headrace.bench._au import au_epochs, compute_times
from headrace.bench._kind import Batch, Kind, make_kind
from headrace.bench._workload import builtin_workloads


def _kind(tmp_path: Path) -> Kind:
    wl = builtin_workloads()["npz"].replace(
        dataset={"files": 4, "record_bytes": 1_000},
        train={"steps": 3, "trials": 2, "warmup_steps": 1, "batch_size": 2},
        variants=("headrace",),
    )
    kind = make_kind(wl.replace(train={"computation_time": 0.001}), str(tmp_path))
    kind.generate()
    return kind


class _Counted:
    """The real stream, counting the batches taken from it."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.taken = stream, 0

    def __iter__(self) -> Iterator[Batch]:
        for batch in self.stream:
            self.taken += 1
            yield batch

    def close(self) -> None:
        self.stream.close()


def test_the_warm_up_epoch_runs_first_on_the_stream_and_is_not_counted(tmp_path: Path) -> None:
    kind = _kind(tmp_path)
    t = kind.workload.train
    opened: list[tuple[int, _Counted]] = []
    real = kind.open

    def open_counted(spec: str, steps: int) -> Any:
        opened.append((steps, _Counted(real(spec, steps))))
        return opened[-1][1]

    kind.open = open_counted  # type: ignore[method-assign]
    acc = 2
    seen: list[tuple[str, int]] = []  # (which epoch, batches taken when it ended)
    epochs = au_epochs(
        kind,
        "headrace",
        acc,
        compute_times(t, t.trials * t.steps),
        t.steps,
        done=lambda _e: seen.append(("counted", opened[0][1].taken)),
        warmed=lambda _e: seen.append(("warm-up", opened[0][1].taken)),
    )
    # One fresh stream, for the warm-up epoch and the trials; the warm-up ends first, after
    # a trial's batches; then each counted trial's.
    assert [n for n, _ in opened] == [(t.trials + _au.WARMUP_EPOCHS) * t.steps * acc]
    per = t.steps * acc
    assert seen == [("warm-up", per), ("counted", 2 * per), ("counted", 3 * per)]
    assert len(epochs) == t.trials


def test_a_report_gives_the_warm_up_apart_from_the_trials_it_counts(tmp_path: Path) -> None:
    toml = """\
name = "w"
kind = "files"
variants = ["headrace", "map-style"]
[dataset]
format = "npz"
files = 6
samples_per_file = 1
record_bytes = 10_000
[train]
batch_size = 2
steps = 3
trials = 3
warmup_steps = 1
computation_time = 0.002
"""
    report = bench_file(tmp_path, toml)
    jsonschema.validate(report, schema())
    for r in report["results"]:
        assert len(r["au_trials"]) == 3, r["variant"]  # the trials, not the warm-up
        assert r["au"] == statistics.fmean(r["au_trials"])
        assert isinstance(r["au_warmup"], float) and 0 <= r["au_warmup"] <= 1
        assert len(r["batches_per_s_trials"]) == r["trials"] == 3
        # a files workload's headline is its fresh passes', as the table's (s55)
        assert r["batches_per_s"] == r["table"]["batches_per_s"]
    # The report says so, where the AU is read, with the warm-up's figures.
    said = [n for n in report["workloads"][0]["notes"] if "warm-up epoch" in n]
    assert len(said) == 1 and "mean of the 3 trial(s) with compute" in said[0], said
    for r in report["results"]:
        assert f"{r['variant']} {r['au_warmup']:.2f}" in said[0]
    # Without compute there is no warm-up epoch to report.
    report = bench_file(tmp_path, toml.replace("0.002", "0.0"))
    jsonschema.validate(report, schema())
    assert all(r["au_warmup"] is None for r in report["results"])
    assert not [n for n in report["workloads"][0]["notes"] if "warm-up epoch" in n]
