"""A files result's headline figures (s55): the JSON's top-level ``batches_per_s``,
``batches_per_s_spread`` and ``gb_per_s`` are the table's (the fresh passes'), and a fresh
pass leaves its warm-up steps out, as the other kinds' trials and DLIO's epochs do.

Until 2026-12-07 a files result's top-level ``batches_per_s`` was the median of its timed
trials, which start from a read-ahead queue filled while the other variants ran: DLIO
ResNet-50 (jpeg) map-style said 266,624 batches/s in the JSON where the table said tens.
And a fresh pass was timed from opening, its warm-up steps counted: the first batch's
fetches (the read-ahead window filling, the pools starting) weighed on 7 or 8 steps.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import jsonschema
import pytest
from _bench_run import Wrapped, bench_file, schema

from headrace.bench import _fresh
from headrace.bench._kind import make_kind
from headrace.bench._report import fresh_pass_rate
from headrace.bench._runner import RunOptions, run_workload
from headrace.bench._workload import builtin_workloads
from headrace.errors import HeadraceError

_TOML = """\
name = "w"
kind = "files"
variants = ["map-style", "headrace"]
[dataset]
format = "npz"
files = 8
samples_per_file = 1
record_bytes = 4096
[reader]
in_flight = 4
prefetch = 2
[train]
batch_size = 2
steps = 2
trials = 2
warmup_steps = 2
"""


def test_a_files_result_heads_with_the_figure_the_table_shows(tmp_path: Path) -> None:
    report = bench_file(tmp_path, _TOML)
    jsonschema.validate(report, schema())
    for r in report["results"]:
        shown = r["table"]
        assert shown["from"] == "fresh_pass"
        # One figure per row: the table's, at the top level too (it was the queue-fed
        # trials' median, thousands of batches/s beside the table's tens).
        assert r["batches_per_s"] == shown["batches_per_s"]
        assert r["gb_per_s"] == shown["gb_per_s"]
        spread = r["batches_per_s_spread"]
        assert (spread["min"], spread["max"]) == (
            shown["batches_per_s_spread"]["min"],
            shown["batches_per_s_spread"]["max"],
        )
        assert spread["median"] == r["batches_per_s"]
        # The trials stay, each one, in the order run.
        assert len(r["batches_per_s_trials"]) == r["trials"] == 2


def test_the_fresh_pass_figure_leaves_the_warm_up_steps_out(tmp_path: Path) -> None:
    report = bench_file(tmp_path, _TOML)
    for r in report["results"]:
        # 8 steps a pass (whole epochs: 2 warm-up + 2 x 2 trial steps, made an epoch of 8):
        # the first 2 are the warm-up, timed apart; the rate is of the other 6.
        assert r["steps"] == 8
        assert r["fresh_pass_warmup_steps"] == 2
        assert len(r["fresh_passes_warmup_s"]) == len(r["fresh_passes_s"])
        counted = r["steps"] - r["fresh_pass_warmup_steps"]
        assert r["fresh_pass_s"] == statistics.median(r["fresh_passes_s"])
        assert r["table"]["batches_per_s"] == counted / r["fresh_pass_s"]
        assert r["samples_per_s"] == counted * 2 / r["fresh_pass_s"]
        assert r["table"]["batches_per_s_spread"]["min"] == counted / max(r["fresh_passes_s"])


class _SlowStart(Wrapped):
    """The real stream, its first ``slow`` batches each held ``hold_s`` (a cold start:
    fault injection), each batch counted."""

    def __init__(self, stream: Any, slow: int, hold_s: float) -> None:
        super().__init__(stream)
        self.slow, self.hold_s = slow, hold_s

    def taking(self) -> None:
        if self.taken < self.slow:
            time.sleep(self.hold_s)


def test_a_slow_start_is_timed_as_the_warm_up_not_as_the_counted_steps(tmp_path: Path) -> None:
    wl = builtin_workloads()["npz"].replace(
        dataset={"files": 4, "record_bytes": 1_000},
        train={"steps": 1, "trials": 1, "warmup_steps": 2, "batch_size": 1},
        variants=("headrace",),
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    streams: list[_SlowStart] = []
    real = kind.open

    def open_slow(spec: str, steps: int) -> Any:
        streams.append(_SlowStart(real(spec, steps), 2, 0.25))
        return streams[-1]

    kind.open = open_slow  # type: ignore[method-assign]
    warm_s, counted_s = _fresh.fresh_pass_s(kind, "headrace", 4, warmup=2)
    assert streams[0].taken == 4
    assert warm_s >= 0.5  # both slow batches are in the warm-up's seconds
    # The counted steps' seconds are those after the warm-up's last batch: the pass's
    # rate counts its 2 steps over them.
    r = {"mb_per_s": 1.0, "stages": {"wall_s": 9.0}, "steps": 4, "fresh_pass_s": counted_s}
    assert fresh_pass_rate({**r, "fresh_pass_warmup_steps": 2}) == 2 / counted_s
    # A report written before the warm-up was left out counted every step.
    assert fresh_pass_rate(r) == 4 / counted_s


class _Refills(Wrapped):
    """The real stream; after each batch taken, a read-ahead's refill: a thread that spends
    ``burn_s`` of CPU (fault injection). ``crossed`` counts the batches taken past the
    warm-up while another stream's refill was still running."""

    streams: ClassVar[list[_Refills]] = []

    def __init__(self, stream: Any, warmup: int, burn_s: float) -> None:
        super().__init__(stream)
        self.warmup, self.burn_s, self.crossed = warmup, burn_s, 0
        self.refill: threading.Thread | None = None
        _Refills.streams.append(self)

    def _burn(self) -> None:
        end = time.thread_time() + self.burn_s
        while time.thread_time() < end:
            pass

    def taking(self) -> None:
        others = [s for s in _Refills.streams if s is not self]
        if self.taken >= self.warmup and any(
            s.refill is not None and s.refill.is_alive() for s in others
        ):
            self.crossed += 1
        if self.refill is None or not self.refill.is_alive():
            self.refill = threading.Thread(target=self._burn, daemon=True)
            self.refill.start()


def test_a_trial_begins_once_the_other_variants_read_ahead_rests(tmp_path: Path) -> None:
    # Timed while another variant's read-ahead refilled its queue, a trial shared the CPUs
    # with it: the first trials of a --dlio run were the slowest, the later sped up as
    # the other streams neared their ends and read less.
    wl = builtin_workloads()["npz"].replace(
        dataset={"files": 8, "record_bytes": 1_000},
        train={"steps": 2, "trials": 2, "warmup_steps": 1, "batch_size": 1},
        variants=("map-style", "headrace"),
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    timed = 1 + 2 * 2  # the trial streams' steps (a measurement or fresh pass's: an epoch, 8)
    real = kind.open
    trial_streams: list[_Refills] = []

    def open_refilling(spec: str, steps: int) -> Any:
        stream = real(spec, steps)
        if steps != timed:
            return stream
        trial_streams.append(_Refills(stream, 1, 0.3))
        return trial_streams[-1]

    kind.open = open_refilling  # type: ignore[method-assign]
    _Refills.streams = []
    _, results = run_workload(kind, options=RunOptions(isolate=False))
    assert [len(r["batches_per_s_trials"]) for r in results] == [2, 2]
    assert [s.taken for s in trial_streams] == [timed, timed]
    assert [s.crossed for s in trial_streams] == [0, 0]


class _EndsEarly(Wrapped):
    """The real stream, cut after ``n`` batches (fault injection: a variant that stops
    short of the steps asked)."""

    def __init__(self, stream: Any, n: int) -> None:
        super().__init__(stream)
        self.n = n

    def __iter__(self) -> Iterator[Any]:
        for batch in super().__iter__():
            if self.taken > self.n:
                return
            yield batch


def test_a_fresh_pass_that_ends_within_its_warm_up_is_a_failed_variant(tmp_path: Path) -> None:
    wl = builtin_workloads()["npz"].replace(
        dataset={"files": 4, "record_bytes": 1_000},
        train={"steps": 1, "trials": 1, "warmup_steps": 2, "batch_size": 1},
        variants=("headrace",),
    )
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    real = kind.open
    kind.open = lambda spec, steps: _EndsEarly(real(spec, steps), 1)  # type: ignore[method-assign]
    with pytest.raises(HeadraceError, match=r"ended after 1 batches, within its 2 warm-up steps"):
        _fresh.fresh_pass_s(kind, "headrace", 4, warmup=2)
