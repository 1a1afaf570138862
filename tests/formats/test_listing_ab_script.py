"""benchmarks/listing_ab.py runs at small scale, one tree as both sides, and checks that
both listed the same keys."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "listing_ab.py"
SRC = Path(__file__).resolve().parents[2] / "src"


def test_small_run_reports_both_sides_and_the_same_keys(tmp_path: Path) -> None:
    args = ["--a", str(SRC), "--b", str(SRC), "--rounds", "2", "--opens", "1"]
    args += ["--folders", "3", "--per-folder", "7", "--root", str(tmp_path)]
    p = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    assert "21 files in 3 folders, 2 rounds" in p.stdout
    assert p.stdout.count("ms an open") == 2 and "B/A paired: median" in p.stdout
    assert "same keys on both sides: True" in p.stdout
    assert sorted(x.name for x in tmp_path.iterdir()) == ["d00", "d01", "d02"]
