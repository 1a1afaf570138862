"""What a ``--dlio`` run's timed trials warm up on, and a plan that says what runs (s54).

A ``--dlio`` run warmed each variant up with one step before its timed trials. A variant
that reads ahead then began trial 1 from a queue barely started, and every later trial
from a queue its read-ahead filled while the other variants ran theirs: trial 1 was the
slowest of 5 in 14 of 16 variants' runs, 0.17-0.89x the median of the later ones (UNet3D
``--scale 1 --record-scale 0.01``; 2c, 2026-12-07); after an epoch's warm-up, in 2 of
16. Each variant now warms up with an untimed epoch (a trial's steps), so that its first
trial, like the later ones, begins after the other variants ran a trial.

The plan printed before a run said "N steps with compute" for the trials AU counts, and
its length "V variants x T trials x S steps", leaving out the warm-up epoch with compute
each variant runs before them (``_au.WARMUP_EPOCHS``, s53): the run was longer than said.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from _bench_run import Wrapped

from headrace.bench import _au
from headrace.bench._dlio import dlio_workload
from headrace.bench._kind import make_kind
from headrace.bench._runner import RunOptions, run_workload
from headrace.cli import main


def _yaml(tmp_path: Path, compute: float = 0.0) -> str:
    # 4 NPZ files of one record, batch 1: 3 epochs of 4 steps.
    path = tmp_path / "w.yaml"
    path.write_text(
        "dataset: {format: npz, num_files_train: 4, num_samples_per_file: 1, "
        "record_length_bytes: 4096}\n"
        f"reader: {{batch_size: 1}}\ntrain: {{epochs: 3, computation_time: {compute}}}\n"
    )
    return str(path)


def test_each_variant_takes_an_epoch_before_its_first_timed_trial(tmp_path: Path) -> None:
    wl = dlio_workload(_yaml(tmp_path)).replace(variants=("headrace", "map-style"))
    t = wl.train
    assert (t.steps, t.trials, t.warmup_steps) == (4, 3, 4)  # the warm-up: an epoch
    kind = make_kind(wl, str(tmp_path / "d"))
    kind.generate()
    opened: list[Wrapped] = []
    real = kind.open

    def open_counted(spec: str, steps: int) -> Any:
        opened.append(Wrapped(real(spec, steps)))
        return opened[-1]

    kind.open = open_counted  # type: ignore[method-assign]
    at_first_trial: list[list[int]] = []

    def progress(what: str, done: int, _work: int) -> None:
        if what.endswith(": trials") and done == 1:
            # the trial streams, one per variant, are the last opened so far
            at_first_trial.append([s.taken for s in opened[-len(wl.variants) :]])

    _, results = run_workload(kind, options=RunOptions(isolate=False), progress=progress)
    # The first variant has run its warm-up epoch and its first trial; the second its
    # warm-up epoch alone, which the first variant's trial 1 came after.
    assert at_first_trial == [[t.warmup_steps + t.steps, t.warmup_steps]]
    for r in results:
        assert len(r["batches_per_s_trials"]) == r["trials"] == 3


def test_the_report_and_the_plan_say_the_warm_up_epoch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    args = ["bench", "--dlio", _yaml(tmp_path), "--root", str(tmp_path / "d"), "-q"]
    args += ["--no-isolate", "--variants", "headrace"]
    assert main([*args, "--json", str(out)]) == 0
    err = capsys.readouterr().err
    train = json.loads(out.read_text())["workloads"][0]["workload"]["train"]
    assert train["warmup_steps"] == train["steps"] == 4
    assert "plan: 4 warm-up steps (an untimed epoch, so that the first trial begins" in err
    # --steps: the warm-up follows, a trial's steps; --warmup sets it, as for any workload
    listed = ["bench", "--list", "--dlio", _yaml(tmp_path), "--root", str(tmp_path / "d")]
    assert main([*listed, "--steps", "2"]) == 0
    assert "plan: 2 warm-up steps (an untimed epoch" in capsys.readouterr().out
    assert main([*listed, "--steps", "2", "--warmup", "1"]) == 0
    assert "plan: 1 warm-up step, then 3 trials x 2 steps" in capsys.readouterr().out


def test_the_plan_counts_the_warm_up_epoch_with_compute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    args = ["bench", "--dlio", _yaml(tmp_path, 0.002), "--root", str(tmp_path / "d"), "-q"]
    args += ["--no-isolate", "--variants", "headrace", "--json", str(out)]
    assert main(args) == 0
    err = capsys.readouterr().err
    said = re.search(r"and (\d+) steps with compute \(1 warm-up epoch and 3 trials", err)
    assert said is not None, err
    # What it said is what ran: the warm-up epoch and the trials AU counts, of 4 steps each.
    r = json.loads(out.read_text())["results"][0]
    assert r["au_warmup"] is not None and len(r["au_trials"]) == 3
    ran = (_au.WARMUP_EPOCHS + len(r["au_trials"])) * r["steps_per_trial"]
    assert int(said.group(1)) == ran == 16
    # ... and its length too: 16 steps x 0.002 s
    assert "takes at least 0.032 s: the compute alone, 1 variant x (1 warm-up epoch + " in err
    assert "3 trials) x 4 steps x 0.002 s" in err


def test_short_au_of_a_dlio_run_names_the_scale_that_keeps_an_epoch_a_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "use --steps 256 or more" alone: a --dlio run's trials are then 64 of its 4-step
    # epochs each, no longer DLIO's epochs; a larger --scale keeps an epoch a trial.
    args = ["bench", "--dlio", _yaml(tmp_path, 0.002), "--root", str(tmp_path / "d"), "-q"]
    assert main([*args, "--no-isolate", "--variants", "headrace"]) == 0
    out = capsys.readouterr().out
    assert "AU* trials of 4 steps with compute" in out
    assert "use --steps 256 or more (trials of several epochs), or a larger --scale" in out
    # a workload file's advice is the steps alone
    toml = tmp_path / "w.toml"
    toml.write_text(
        'name = "w"\nkind = "files"\nvariants = ["headrace"]\n[dataset]\nformat = "npz"\n'
        "files = 4\nsamples_per_file = 1\nrecord_bytes = 4096\n[train]\nbatch_size = 1\n"
        "steps = 4\ntrials = 1\nwarmup_steps = 1\ncomputation_time = 0.002\n"
    )
    assert (
        main(["bench", "-w", str(toml), "--root", str(tmp_path / "f"), "-q", "--no-isolate"]) == 0
    )
    out = capsys.readouterr().out
    assert "few steps average it; use --steps 256 or more\n" in out
