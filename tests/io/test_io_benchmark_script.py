"""benchmarks/io_adaptive.py runs at small scale and verifies its digests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headrace.io._uring import ring_pool

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPT = BENCHMARKS / "io_adaptive.py"


def run(*args: str, script: Path = SCRIPT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, str(script), *args],
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
    assert set(r["median_batch_seconds"]) == {"mmap", "pread", "pread-threads", "adaptive"}
    assert r["ratio_vs_mmap"]["mmap"] == 1.0
    assert all(r["verified"].values()) and r["common_rows_identical"]
    assert all(len(d) == 2 for d in r["digests"].values())
    assert "x mmap" in p.stdout


def test_refuses_too_few_rows(tmp_path: Path) -> None:
    p = run("--root", str(tmp_path), "--rows", "10", "--width", "10")
    assert p.returncode == 2 and "distinct rows" in p.stderr


@pytest.mark.skipif(not ring_pool().available(), reason="io_uring unavailable")
def test_uring_vs_fio_script_small_run(tmp_path: Path) -> None:
    f = tmp_path / "blocks.bin"
    f.write_bytes(os.urandom(4 << 20))
    script = BENCHMARKS / "io_uring_fio.py"
    for extra in ([], ["--warm", "1M", "--batch", "16", "--mode", "pread"]):
        out = tmp_path / "u.json"
        args = [str(f), "--reads", "64", "--fio", "", "--json", str(out), *extra]
        p = run(*args, script=script)
        assert p.returncode == 0, p.stderr
        r = json.loads(out.read_text())
        assert set(r["median_iops"]) == {"threads@1", "uring@1", "threads@32", "uring@32"}
        assert r["engines"] == {s: [s.split("@")[0]] for s in r["median_iops"]}
        assert all(r["verified"].values()) and r["identical"]
        assert r["regime"] == ("warm" if extra else "cold")
        assert r["mode"] == ("pread" if extra else "odirect")
        assert "uring@32 / threads@32" in r["ratios"] and "identical=True" in p.stdout
    p = run(str(f), "--reads", "4096", "--fio", "", script=script)
    assert p.returncode == 2 and "distinct 4 KiB blocks" in p.stderr


def test_adaptive_slowfs_local_run_agrees_on_digests() -> None:
    # The slow-mount modes need FUSE and seconds; the local mode is the same code
    # for reading, hashing and reporting, at a small scale.
    p = run(
        "--local",
        "--rows",
        "256",
        "--reads",
        "6",
        "--rounds",
        "2",
        script=BENCHMARKS / "adaptive_slowfs.py",
    )
    assert p.returncode == 0, p.stderr
    assert "digest (every side)" in p.stdout
    rows = [ln for ln in p.stdout.splitlines() if ln.startswith("| ") and "side" not in ln]
    assert [r.split("|")[1].strip() for r in rows] == ["adaptive", "pread", "mmap"]
    assert "'checks': 1" in p.stdout  # the adaptive reader checked its first mapped read
