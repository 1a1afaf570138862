"""benchmarks/fresh_pages.py runs at a small scale and every side reads the same bytes."""

from __future__ import annotations

from pathlib import Path

from _scripts import run_benchmark


def test_fresh_pages_script_reads_the_same_bytes_on_every_side(tmp_path: Path) -> None:
    p = run_benchmark("fresh_pages.py", "--mib", "8", "--trials", "2", "--dir", str(tmp_path))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()[1:]
    sides = [line[:18].strip() for line in lines]
    assert sides == ["fresh 4 KiB pages", "fresh huge pages", "recycled", "recycled 4 KiB"]
    assert len({line.rsplit("sha256 ", 1)[1] for line in lines}) == 1
