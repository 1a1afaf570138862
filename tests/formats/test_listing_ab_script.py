"""benchmarks/listing_ab.py runs at small scale, one tree as both sides, and checks that
both listed the same keys."""

from __future__ import annotations

from pathlib import Path

from _scripts import run_benchmark

SRC = Path(__file__).resolve().parents[2] / "src"


def test_small_run_reports_both_sides_and_the_same_keys(tmp_path: Path) -> None:
    args = ["--a", str(SRC), "--b", str(SRC), "--rounds", "2", "--opens", "1"]
    args += ["--folders", "3", "--per-folder", "7", "--root", str(tmp_path)]
    p = run_benchmark("listing_ab.py", *args)
    assert p.returncode == 0, p.stderr
    assert "21 files in 3 folders, 2 rounds" in p.stdout
    assert p.stdout.count("ms an open") == 2 and "B/A paired: median" in p.stdout
    assert "same keys on both sides: True" in p.stdout
    assert sorted(x.name for x in tmp_path.iterdir()) == ["d00", "d01", "d02"]
