"""benchmarks/tar_index_scale.py runs at small scale: every figure, one digest."""

from __future__ import annotations

import ast
import re

from _scripts import run_benchmark


def test_small_run_reports_every_figure_and_one_digest() -> None:
    p = run_benchmark("tar_index_scale.py", "--shards", "30", "--members", "1000", "--rounds", "2")
    assert p.returncode == 0, p.stderr
    line = re.search(r"^\S+: medians of 2: (\{.*\}); sha256 (\[.*\])$", p.stdout, re.M)
    assert line is not None, p.stdout
    figures, digests = ast.literal_eval(line[1]), ast.literal_eval(line[2])
    assert len(digests) == 1 and figures["kept"] == 30
    # About 22 bytes a member held (37 before), and what is pickled is about as much.
    assert 0 < figures["per_member_b"] < 30
    assert 0 < figures["pickle_mb"] <= figures["held_mb"] + 0.1
    for fig in ("walk_us", "pickle_s", "unpickle_s"):
        assert figures[fig] >= 0, fig
