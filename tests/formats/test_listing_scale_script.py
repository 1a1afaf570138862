"""benchmarks/listing_scale.py runs at small scale: both sides, every figure, one digest."""

from __future__ import annotations

import re

from _scripts import run_benchmark


def test_small_run_reports_every_figure_and_one_digest() -> None:
    p = run_benchmark("listing_scale.py", "--sizes", "3000", "--rounds", "2")
    assert p.returncode == 0, p.stderr
    assert "3,000 keys, 2 rounds, medians (old | new | new/old):" in p.stdout
    for fig in ("held_mb", "pickle_mb", "pickle_s", "unpickle_s", "fork_mb"):
        assert re.search(rf"^  {fig} +\S+ \| +\S+ \| \d", p.stdout, re.M), fig
    digests = re.search(r"^  sha256 +(\[.*\]) \| (\[.*\])$", p.stdout, re.M)
    assert digests is not None and digests[1] == digests[2]
    # The packed side holds less than the lists (the figure the benchmark is for).
    held = re.search(r"^  held_mb +(\S+) \| +(\S+) \|", p.stdout, re.M)
    assert held is not None and float(held[2]) < float(held[1])
