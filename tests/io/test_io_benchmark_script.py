"""benchmarks/io_adaptive.py runs at small scale and verifies its digests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "io_adaptive.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_small_run_reports_medians_ratios_and_digests(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    p = run(
        "--root",
        str(tmp_path),
        "--rows",
        "512",
        "--width",
        "100",
        "--batch",
        "8",
        "--batches",
        "4",
        "--trials",
        "2",
        "--json",
        str(out),
    )
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    assert set(r["median_batch_seconds"]) == {"mmap", "pread", "adaptive"}
    assert r["ratio_vs_mmap"]["mmap"] == 1.0
    assert all(r["verified"].values()) and r["common_rows_identical"]
    assert all(len(d) == 2 for d in r["digests"].values())
    assert "x mmap" in p.stdout


def test_refuses_too_few_rows(tmp_path: Path) -> None:
    p = run("--root", str(tmp_path), "--rows", "10", "--width", "10")
    assert p.returncode == 2 and "distinct rows" in p.stderr
