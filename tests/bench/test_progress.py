"""``headrace bench`` and ``headrace gen`` show a progress bar on a terminal, on stderr,
and none with -q."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("rich", reason="the bar is rich's (pip install 'headrace[rich]')")

TINY = ["--token-file-gib", "0.004", "--steps", "20", "--trials", "2", "--warmup", "3"]


def headrace(*args: str) -> subprocess.CompletedProcess[str]:
    # rich takes FORCE_COLOR for a terminal and TTY_INTERACTIVE for one that redraws.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.update(FORCE_COLOR="1", TTY_INTERACTIVE="1", COLUMNS="100")
    cmd = [sys.executable, "-m", "headrace.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=True)


def bench(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return headrace("bench", "--root", str(root), *TINY, *extra)


def test_the_bar_counts_the_trials_on_stderr_and_quiet_has_none(tmp_path: Path) -> None:
    shown = bench(tmp_path)
    # 2 trials x 4 variants, and the digest pass over the 4 variants before them.
    bar = "tokens: trials \x1b["  # the label, then the bar's colour
    assert bar in shown.stderr and "8/8" in shown.stderr
    assert "tokens: digest naive \x1b[" in shown.stderr
    assert bar not in shown.stdout  # stdout is the report alone
    assert "headrace-async" in shown.stdout
    # Measured in this process (no measurement process a variant: their stderr is never
    # shown anyway), so a bar drawn by any part of the run with -q would show here.
    quiet = bench(tmp_path, "-q", "--no-isolate")
    assert bar not in quiet.stderr + quiet.stdout
    assert "headrace-async" in quiet.stdout


def test_gen_counts_the_files_it_writes_on_stderr(tmp_path: Path) -> None:
    shown = headrace("gen", "jpeg", "--files", "3", "--root", str(tmp_path))
    assert "gen jpeg \x1b[" in shown.stderr and "3/3" in shown.stderr
    assert shown.stdout.startswith("jpeg: 3 files, ") and "\x1b[" not in shown.stdout
    quiet = headrace("gen", "jpeg", "--files", "3", "--root", str(tmp_path / "q"), "-q")
    assert "gen jpeg \x1b[" not in quiet.stderr
