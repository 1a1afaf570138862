"""``headrace bench compare`` as a CI gate (s51): each row says whether B is slower or
faster than A beyond the trials' spread, and the exit code fails a real slowdown, not
noise. Until 2026-12-07 compare printed B/A alone and exited 0 on any slowdown."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest

from headrace.cli import main

TINY = ["--token-file-gib", "0.004", "--steps", "20", "--trials", "3", "--warmup", "3", "-q"]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real report of 3 trials, as `headrace bench --json` writes it."""
    root = tmp_path_factory.mktemp("bench")
    path = root / "a.json"
    args = ["bench", "--root", str(root / "d"), *TINY, "--no-isolate", "--json", str(path)]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main([*args, "--variants", "naive,headrace-sync"]) == 0
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _with(report: dict[str, Any], variant: str, lo: float, mid: float, hi: float) -> Any:
    """``report`` with ``variant``'s trials set to (slowest, median, fastest) batches/s,
    in its figures and in its ``table``'s, as a run of those trials writes them."""
    out = copy.deepcopy(report)
    for r in out["results"]:
        if r["variant"] == variant:
            r["batches_per_s"] = r["table"]["batches_per_s"] = mid
            r["batches_per_s_spread"] = {"min": lo, "max": hi, "median": mid}
            r["table"]["batches_per_s_spread"] = {"min": lo, "max": hi}
    return out


def _compare(tmp_path: Path, a: Any, b: Any, *flags: str) -> tuple[int, str, str]:
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["bench", "compare", str(pa), str(pb), *flags])
    return rc, out.getvalue(), err.getvalue()


def _row(out: str, variant: str) -> str:
    return next(line for line in out.splitlines() if line.split()[1:2] == [variant])


def test_a_slowdown_beyond_the_spread_fails_the_gate(
    report: dict[str, Any], tmp_path: Path
) -> None:
    # B's fastest trial below A's slowest, 30% slower: exit 0 until 2026-12-07.
    a = _with(report, "headrace-sync", 950.0, 1000.0, 1050.0)
    b = _with(report, "headrace-sync", 650.0, 700.0, 750.0)
    rc, out, err = _compare(tmp_path, a, b)
    assert rc == 1
    assert "0.70x" in _row(out, "headrace-sync") and "SLOWER 30%" in _row(out, "headrace-sync")
    assert "1 variant(s) slower in B than in A" in err and "tokens/headrace-sync 0.70x" in err
    # The same runs the other way round: faster, and the gate passes.
    rc, out, err = _compare(tmp_path, b, a)
    assert rc == 0 and "faster 43%" in _row(out, "headrace-sync") and "slower" not in err


def test_noise_is_not_a_regression(report: dict[str, Any], tmp_path: Path) -> None:
    # Two default runs of one tree on a busy machine (2026-12-07): naive 567 (434-594)
    # then 435 (409-508) batches/s, 0.77x with the trials' ranges overlapping.
    a = _with(report, "naive", 434.0, 567.0, 594.0)
    b = _with(report, "naive", 409.0, 435.0, 508.0)
    rc, out, err = _compare(tmp_path, a, b)
    assert rc == 0, err
    assert "0.77x" in _row(out, "naive") and "within spread" in _row(out, "naive")


def test_a_slowdown_under_the_tolerance_is_said_and_passes(
    report: dict[str, Any], tmp_path: Path
) -> None:
    a = _with(report, "headrace-sync", 990.0, 1000.0, 1010.0)
    b = _with(report, "headrace-sync", 960.0, 970.0, 980.0)  # 3%, beyond a tight spread
    rc, out, _ = _compare(tmp_path, a, b)
    assert rc == 0 and "slower 3%" in _row(out, "headrace-sync")
    rc, _, err = _compare(tmp_path, a, b, "--max-slowdown", "2")
    assert rc == 1 and "by more than 2%" in err
    b = _with(report, "headrace-sync", 650.0, 700.0, 750.0)
    assert _compare(tmp_path, a, b, "--max-slowdown", "35")[0] == 0


def test_too_few_trials_are_not_judged(report: dict[str, Any], tmp_path: Path) -> None:
    # 2 trials each: all of B's below all of A's happens by chance 1 time in 6.
    a = _with(report, "headrace-sync", 950.0, 1000.0, 1050.0)
    b = _with(report, "headrace-sync", 650.0, 700.0, 750.0)
    for r in b["results"]:
        r["trials"] = 2
    rc, out, err = _compare(tmp_path, a, b)
    assert rc == 0 and "slower" not in err
    assert "? 2 trials" in _row(out, "headrace-sync")
    assert "--trials 3 or more" in out


def test_max_slowdown_is_checked_and_refused_on_a_run(
    report: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = _compare(tmp_path, report, report, "--max-slowdown", "-5")
    assert rc == 2 and "--max-slowdown -5" in err
    assert main(["bench", "--max-slowdown", "5", "--list"]) == 2
    assert "--max-slowdown is a flag of 'compare'" in capsys.readouterr().err
