"""``headrace bench compare`` gates AU as it gates batches/s (s53): a variant whose AU is
lower in B than in A beyond the trials' spread and by more than ``--max-au-drop`` points
fails compare (exit 1), named with both figures. Until 2026-12-07 compare gated batches/s
alone: a storage change that took a variant from AU 0.95 to 0.60 exited 0."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest

from headrace.cli import main

# Tokens with 1 ms of simulated compute a step: AU measured, in a second or so.
WORKLOAD = """\
name = "toks"
kind = "tokens"
variants = ["naive", "headrace-sync"]
[dataset]
dtype = "uint32"
token_file_gib = 0.004
context = 64
[train]
batch_size = 4
steps = 6
trials = 3
warmup_steps = 2
computation_time = 0.001
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real report with AU, 3 trials, as `headrace bench --json` writes it."""
    root = tmp_path_factory.mktemp("bench")
    (root / "w.toml").write_text(WORKLOAD)
    path = root / "a.json"
    args = ["bench", "-w", str(root / "w.toml"), "--root", str(root / "d"), "-q"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main([*args, "--no-isolate", "--json", str(path)]) == 0
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _with_au(report: dict[str, Any], variant: str, trials: list[float]) -> Any:
    """``report`` with ``variant``'s AU trials set to ``trials``, its AU their mean and its
    verdict against the workload's threshold, as a run of those trials writes them."""
    out = copy.deepcopy(report)
    threshold = out["workloads"][0]["au_threshold"]
    for r in out["results"]:
        if r["variant"] == variant:
            r["au_trials"] = trials
            r["au"] = sum(trials) / len(trials)
            r["au_pass"] = r["au"] >= threshold
    return out


def _compare(tmp_path: Path, a: Any, b: Any, *flags: str) -> tuple[int, str, str]:
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["bench", "compare", str(pa), str(pb), *flags])
    return rc, out.getvalue(), err.getvalue()


def _au_cell(out: str, variant: str) -> str:
    """``variant``'s cell in the AU change column (the change column beside it may say
    "within spread" of batches/s too)."""
    lines = out.splitlines()
    row = next(line for line in lines if line.split()[1:2] == [variant])
    return row[lines[0].index("AU change") :].split("  ")[0].strip()


def test_the_real_report_has_au_trials_to_judge(report: dict[str, Any]) -> None:
    for r in report["results"]:
        assert r["au"] is not None and len(r["au_trials"]) == 3


def test_a_lower_au_beyond_the_spread_fails_the_gate(
    report: dict[str, Any], tmp_path: Path
) -> None:
    a = _with_au(report, "headrace-sync", [0.94, 0.95, 0.96])
    b = _with_au(report, "headrace-sync", [0.58, 0.60, 0.62])
    rc, out, err = _compare(tmp_path, a, b, "--max-slowdown", "99")
    assert rc == 1, err
    assert _au_cell(out, "headrace-sync") == "LOWER 35.0"
    assert "AU change" in out.splitlines()[0] and "--max-au-drop" in out
    assert "1 variant(s) kept a lower AU in B than in A" in err
    assert "toks/headrace-sync AU 0.95 (A) -> 0.60 (B)" in err
    # The other way round: higher, and the gate passes.
    rc, out, err = _compare(tmp_path, b, a, "--max-slowdown", "99")
    assert rc == 0, err
    assert _au_cell(out, "headrace-sync") == "higher 35.0" and "lower AU" not in err


def test_an_au_drop_within_the_spread_or_the_tolerance_passes(
    report: dict[str, Any], tmp_path: Path
) -> None:
    a = _with_au(report, "headrace-sync", [0.80, 0.95, 0.99])
    b = _with_au(report, "headrace-sync", [0.70, 0.85, 0.90])  # ranges overlap
    rc, out, err = _compare(tmp_path, a, b, "--max-slowdown", "99")
    assert rc == 0, err
    assert _au_cell(out, "headrace-sync") == "within spread"
    a = _with_au(report, "headrace-sync", [0.95, 0.95, 0.96])
    b = _with_au(report, "headrace-sync", [0.92, 0.92, 0.93])  # 3 points, beyond the spread
    rc, out, _ = _compare(tmp_path, a, b, "--max-slowdown", "99")
    assert rc == 0 and _au_cell(out, "headrace-sync") == "lower 3.0"
    rc, _, err = _compare(tmp_path, a, b, "--max-slowdown", "99", "--max-au-drop", "2")
    assert rc == 1 and "by more than 2 points" in err


def test_too_few_au_trials_are_not_judged(report: dict[str, Any], tmp_path: Path) -> None:
    a = _with_au(report, "headrace-sync", [0.95, 0.96])
    b = _with_au(report, "headrace-sync", [0.50, 0.52])
    rc, out, err = _compare(tmp_path, a, b, "--max-slowdown", "99")
    assert rc == 0 and "lower AU" not in err
    assert _au_cell(out, "headrace-sync") == "? 2 trials"


def test_a_report_that_counted_the_cold_epoch_is_said_to(
    report: dict[str, Any], tmp_path: Path
) -> None:
    # Written before the warm-up epoch: no au_warmup, the cold first epoch in its AU.
    old = copy.deepcopy(report)
    for r in old["results"]:
        del r["au_warmup"]
    _, out, _ = _compare(tmp_path, old, report, "--max-slowdown", "99")
    assert "note: toks: A's AU counts each stream's first epoch" in out
    _, out, _ = _compare(tmp_path, report, report, "--max-slowdown", "99")
    assert "first epoch" not in out


def test_max_au_drop_is_checked_and_refused_on_a_run(
    report: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = _compare(tmp_path, report, report, "--max-au-drop", "-1")
    assert rc == 2 and "--max-au-drop -1" in err
    assert main(["bench", "--max-au-drop", "5", "--list"]) == 2
    assert "--max-au-drop is a flag of 'compare'" in capsys.readouterr().err
