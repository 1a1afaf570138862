"""`max acc.` and the AU column are one measurement (session 52): a run's `--accelerators
auto` said 1 where `--accelerators 2` passed at AU 0.98, because the search judged each
count on one 7-step epoch of a fresh stream, and the AU column is the mean of 5 trials."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from headrace._messages import byte_size
from headrace.bench import _au
from headrace.bench._au import max_accelerators
from headrace.bench._cli import _demand, _per_request
from headrace.bench._dlio import BUILTIN_DLIO, dlio_workload
from headrace.bench._kind import Kind, make_kind
from headrace.bench._runner import RunOptions, run_workload
from headrace.bench._workload import builtin_workloads
from headrace.cli import main
from headrace.emulate import SlowFSConfig, fuse_available


def _kind(tmp_path: Path, **train: Any) -> Kind:
    wl = builtin_workloads()["npz"].replace(
        dataset={"files": 4, "record_bytes": 1_000},
        train={"steps": 3, "trials": 2, "warmup_steps": 1, "batch_size": 2, **train},
        variants=("headrace",),
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    return kind


def _record_opens(kind: Kind, log: list[tuple[str, int]]) -> None:
    """Log each stream ``kind`` opens (for how many batches); the stream is the real one."""
    real = kind.open

    def open_logged(spec: str, steps: int) -> Any:
        log.append(("open", steps))
        return real(spec, steps)

    kind.open = open_logged  # type: ignore[method-assign]


def test_the_search_judges_each_count_as_the_au_column_does(tmp_path: Path) -> None:
    # A real run: its AU column at 256 accelerators (256 batches per 1 ms of compute: it
    # fails), then the search from there, which probes fewer. Every stream the search opens
    # must be the AU column's measurement at its count, trials x steps x N batches: it was
    # one epoch of 5 steps (x N), which a fresh stream's slow start failed where the AU
    # column's trials passed.
    kind = _kind(tmp_path, computation_time=0.001)
    t = kind.workload.train
    log: list[tuple[str, int]] = []
    _record_opens(kind, log)

    def progress(label: str, done: int, total: int) -> None:
        log.append((label, done))

    _, results = run_workload(
        kind,
        options=RunOptions(
            isolate=False, warm_cache=False, accelerators=256, accelerators_auto=True
        ),
        progress=progress,
    )
    with_compute = [i for i, (what, _) in enumerate(log) if what.endswith("trials with compute")]
    au_column = [n for what, n in log[: with_compute[0]] if what == "open"][-1]
    searched = [n for what, n in log[with_compute[-1] :] if what == "open"]
    per_count = (t.trials + _au.WARMUP_EPOCHS) * t.steps  # the warm-up epoch too (s53)
    assert au_column == per_count * 256
    assert results[0]["au_pass"] is False, results[0]  # 256 batches a millisecond: no loader
    assert searched, log  # from a failed 256 it probes at least one accelerator
    assert [n % per_count for n in searched] == [0] * len(searched), (per_count, searched)
    assert max(searched) < au_column  # below the count the AU column measured, not again


def test_each_count_is_judged_on_the_trials_au_mean(tmp_path: Path) -> None:
    # Directly: every count probed opens one stream for the AU column's trials x steps.
    kind = _kind(tmp_path, computation_time=0.001)
    t = kind.workload.train
    log: list[tuple[str, int]] = []
    _record_opens(kind, log)
    found = max_accelerators(kind, "headrace", known=(64, False))
    per_count = (t.trials + _au.WARMUP_EPOCHS) * t.steps  # the warm-up epoch too (s53)
    counts = [n // per_count for _, n in log]
    assert [n % per_count for _, n in log] == [0] * len(log), log
    assert counts[0] == 1  # from a failed 64 the search starts at one accelerator
    assert found < 64
    assert all(c < 64 for c in counts)


def test_trials_of_one_step_are_searched_on_epochs_of_their_own(tmp_path: Path) -> None:
    # One step counts none (AU 0 by definition): the search's epochs are longer, as many.
    kind = _kind(tmp_path, computation_time=0.001, steps=1)
    t = kind.workload.train
    log: list[tuple[str, int]] = []
    _record_opens(kind, log)
    max_accelerators(kind, "headrace", known=None, most=1)
    probe = _au.default_probe_steps(t)
    assert [n for _, n in log][:1] == [(t.trials + _au.WARMUP_EPOCHS) * probe]


UNET3D = str(Path(BUILTIN_DLIO) / "unet3d_h100.yaml")


def test_the_demand_line_before_a_run_gives_the_workloads_mean_too(tmp_path: Path) -> None:
    # UNet3D at --scale 0.25 draws 42 files of 1.3 MB average (stdev 0.4 of the mean):
    # the line said 2.89 GB/s, where a reader works out 3.18 from the YAML, without a word
    # (the end-of-run note said both).
    kind = make_kind(dlio_workload(UNET3D, scale=0.25, record_scale=0.01), str(tmp_path))
    t = kind.workload.train
    here, asked = kind.record_bytes(), kind.workload.dataset["record_bytes"]
    assert abs(here / asked - 1) > 0.05  # drawn: the dataset's mean is not the YAML's
    line = _demand(kind)
    at_mean = kind.host_batch * asked / t.computation_time
    assert f"= {byte_size(kind.host_batch * here / t.computation_time)}/s per accelerator" in line
    assert (
        f"its records are drawn with a stdev and average {byte_size(here)} here, the "
        f"workload's mean {byte_size(asked)}: {byte_size(at_mean)}/s at that" in line
    ), line
    # x N accelerators: the sum at the workload's mean is N times too.
    assert f"/s at that, x 4 = {byte_size(4 * at_mean)}/s" in _demand(kind, 4)
    # Records of one size (no stdev): nothing drawn to say.
    fixed = make_kind(
        dlio_workload(str(Path(BUILTIN_DLIO) / "resnet50_h100.yaml"), scale=0.002),
        str(tmp_path / "r"),
    )
    assert "drawn" not in _demand(fixed)


def test_scaled_records_on_a_storage_with_per_request_latency_say_what_it_leaves(
    tmp_path: Path,
) -> None:
    # --record-scale 0.01 makes each file 0.01 of its bytes, not each request's latency: a
    # run on S3 or slowfs pays that latency for a hundredth of the bytes, and says so.
    wl = dlio_workload(UNET3D, scale=0.25, record_scale=0.01)
    local = make_kind(wl, str(tmp_path))
    assert _per_request(local, 0.01, None) is None  # no latency asked for: nothing to say
    slow = _per_request(local, 0.01, SlowFSConfig(read_latency_ms=2, open_latency_ms=30))
    assert slow is not None
    assert slow.startswith("unet3d: --record-scale 0.01 makes each file 0.01 of its bytes")
    assert "slowfs's 30 ms per open" in slow and "understate" in slow, slow
    assert _per_request(local, 1.0, SlowFSConfig(read_latency_ms=2)) is None  # whole records
    s3 = make_kind(wl.replace(reader={"storage": "s3", "latency_ms": 20}), str(tmp_path / "s"))
    said = _per_request(s3, 0.01, None)
    assert said is not None and "the proxy's 20 ms" in said and "understate" in said, said


def test_a_scaled_run_through_slowfs_says_so_before_and_in_its_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ok, reason = fuse_available()
    if not ok:
        pytest.skip(f"FUSE unavailable: {reason}")
    out = tmp_path / "r.json"
    rc = main(
        [
            "bench",
            "--root",
            str(tmp_path / "data"),
            "--dlio",
            UNET3D,
            "--scale",
            "0.05",
            "--record-scale",
            "0.001",
            "--storage",
            "slowfs",
            "--latency-ms",
            "1",
            "--variants",
            "headrace-raw",
            "--steps",
            "2",
            "--trials",
            "1",
            "--quiet",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    before = capsys.readouterr().err  # the lines before the run (the tables: stdout)
    said = "unet3d: --record-scale 0.001 makes each file 0.001 of its bytes, not each request's"
    assert said in before, before
    assert "its records are drawn with a stdev" in before.splitlines()[0], before
    notes = json.loads(out.read_text())["notes"]
    assert [n for n in notes if n.startswith(said)], notes
