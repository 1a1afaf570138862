"""Parquet and Hub-images amplification: bytes read over each delivered row's share of
its row group's stored bytes, every time a batch has it, as the files kinds count it.

Until 2026-12-07 the yardstick was each row group the run touched, once: a run of N
epochs showed about N for a reader that read every group once an epoch (parquet 3.00,
hub-images' headrace 8.22 and naive 11.09 beside jpeg's 1.00), as if it read N times
what it needed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from _bench_run import bench_file

from headrace.bench._kind import make_kind
from headrace.bench._workload import Workload

TINY = (
    'name = "p"\nkind = "parquet"\nvariants = ["naive", "headrace"]\n'
    "[dataset]\nrows = 256\nwidth = 33\nfiles = 2\ngroup_rows = 32\n"
    "[reader]\nwindow_rows = 64\nprefetch = 2\n"
    # 2 + 3 x 32 = 98 steps of 8 rows: a measurement pass of about 3 epochs
    "[train]\nbatch_size = 8\nsteps = 32\ntrials = 3\nwarmup_steps = 2\n"
)


def test_the_yardstick_is_each_delivered_rows_share_of_its_group(tmp_path: Path) -> None:
    wl = Workload.from_dict(tomllib.loads(TINY), where="p.toml")
    kind = make_kind(wl, str(tmp_path / "d"))
    kind.generate()
    # Independently of the kind: each group's stored bytes and rows from pyarrow's footer.
    share: list[float] = []
    for path in sorted(kind.files()):
        md = pq.ParquetFile(path).metadata
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            stored = sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
            share.append(stored / rg.num_rows)
    steps = 98
    groups = np.concatenate([g for _, g in kind.plan(0, steps)])
    assert len(groups) == steps * 8
    want = sum(share[g] for g in groups.tolist())
    assert abs(kind.unique_payload_bytes(steps) - want) <= 0.001 * want


def test_a_reader_of_every_group_once_an_epoch_is_not_amplified(tmp_path: Path) -> None:
    report = bench_file(tmp_path, TINY, stem="p")
    for r in report["results"]:
        epochs = r["steps"] * 8 / 256
        assert epochs > 2.5
        # About one read of each group an epoch (less where a window's groups served two
        # epochs), not the run's epoch count.
        assert 0.5 < r["amplification"] < 1.5, (r["variant"], r["amplification"], epochs)
