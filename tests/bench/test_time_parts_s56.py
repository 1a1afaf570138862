"""The "where the time went" table's parts add up to its ``pass s``: opening the stream,
inside ``next`` and the consumer, each second counted in one of them.

Until 2026-12-07 the opening and the bookkeeping between a batch's digest and the next
``next`` were in none: a Hub-images ``headrace-raw`` pass of 31.4 s showed 9.3 s in
``next`` and 14.4 s consumer, 7.8 s (25%) nowhere; Parquet ``headrace`` 21%.
"""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import jsonschema
from _bench_run import bench_file, schema

from headrace.bench._kind import make_kind
from headrace.bench._measure import measure_pass
from headrace.bench._report import print_report
from headrace.bench._workload import Workload

TINY = (
    'name = "w"\nkind = "tokens"\nvariants = ["naive", "headrace-sync", "headrace-async"]\n'
    "[dataset]\ntoken_file_gib = 0.001\ncontext = 64\n"
    "[reader]\nwindow_mib = 1\nblock_mib = 0.0625\nprefetch = 4\n"
    "[train]\nbatch_size = 4\nsteps = 8\ntrials = 2\nwarmup_steps = 1\n"
)

#: A slow open (a mount's listing, a store's first request), injected.
OPEN_S = 0.3


def _parts(st: dict[str, Any]) -> float:
    return float(st["open_s"] + st["loader_s"] + st["consumer_s"])


def test_a_pass_counts_a_slow_open_apart_and_its_parts_add_up(tmp_path: Path) -> None:
    import tomllib

    wl = Workload.from_dict(tomllib.loads(TINY), where="w.toml")
    kind = make_kind(wl, str(tmp_path / "d"))
    kind.generate()
    opening = kind.open

    def slow_open(spec: str, steps: int) -> Any:
        time.sleep(OPEN_S)
        return opening(spec, steps)

    kind.open = slow_open  # type: ignore[method-assign]
    for spec in ("naive", "headrace-async"):
        m = measure_pass(kind, spec, 16)
        assert m["steps"] == 16
        assert m["open_s"] >= OPEN_S
        # Every second of the pass in one part: the open was in none (0.3 s missing).
        parts = m["open_s"] + m["loader_s"] + m["consumer_s"]
        assert abs(m["wall_s"] - parts) <= 0.01 * m["wall_s"] + 0.002, (spec, m)
        # The first batch's time still runs from the opening.
        assert m["time_to_first_batch_s"] >= m["open_s"]


def test_the_report_shows_open_s_and_every_row_adds_up(tmp_path: Path) -> None:
    report = bench_file(tmp_path, TINY)
    jsonschema.validate(report, schema())
    for r in report["results"]:
        st = r["stages"]
        assert st["open_s"] is not None and st["open_s"] >= 0
        assert abs(st["wall_s"] - _parts(st)) <= 0.01 * st["wall_s"] + 0.002, r["variant"]
    out = io.StringIO()
    print_report(report, file=out)
    text = out.getvalue()
    title = next(line for line in text.splitlines() if "where the time went" in line)
    assert "pass s = open s + in next s + consumer s" in title
    head = next(line for line in text.splitlines() if "open s" in line and "where" not in line)
    cols = [c.strip() for c in head.strip("|┃ \n").replace("┃", "|").split("|")]
    assert cols.index("pass s") < cols.index("open s") < cols.index("in next s")
    assert cols.index("in next s") + 1 == cols.index("consumer s")
