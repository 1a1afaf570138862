"""Table.read_rows from several threads at once (its docstring says it is safe): the
decoded row-group cache stays consistent, every thread gets its own rows."""

from __future__ import annotations

import sys
import threading
from itertools import pairwise
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from headrace.formats import Table


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "t.parquet"
    table = pa.table({"i": np.arange(40, dtype=np.int64), "s": [f"r{i}" for i in range(40)]})
    pq.write_table(table, path, row_group_size=10)
    return path


def test_two_threads_decoding_one_row_group_count_its_rows_once(tmp_path: Path) -> None:
    table = Table.open(_file(tmp_path), row_group_cache=1)
    both = threading.Barrier(2, timeout=10)
    decode = table._decode

    def together(*args: object, **kw: object) -> object:  # both threads miss the cache
        both.wait()
        return decode(*args, **kw)  # type: ignore[arg-type]

    table._decode = together  # type: ignore[method-assign]
    got: list[object] = []
    threads = [
        threading.Thread(target=lambda: got.append(table.read_rows([3, 7])["i"])) for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    table._decode = decode  # type: ignore[method-assign]
    assert [list(g) for g in got] == [[3, 7], [3, 7]]  # type: ignore[call-overload]
    # One copy of row group 0 is kept: its 10 rows, counted once (20 before: the
    # count never came down again, and every later peak_rows was 10 too high).
    assert list(table._cache) == [0]
    assert table._held_rows == 10
    for first in (10, 20, 30):  # a read alone after: one group decoded, one held
        out = table.read_rows([first + 1])
        assert out["i"].tolist() == [first + 1]
        assert table._held_rows == 10
    assert table.peak_rows <= 20
    table.close()


def test_threads_reading_rows_at_random_each_get_their_rows(tmp_path: Path) -> None:
    table = Table.open(_file(tmp_path), row_group_cache=1)
    errors: list[BaseException] = []

    def run(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(150):
                rows = rng.integers(0, 40, int(rng.integers(1, 6)))
                out = table.read_rows(rows)
                assert out["i"].tolist() == rows.tolist()
                s = out["s"]
                words = [bytes(s.values[a:b]).decode() for a, b in pairwise(s.offsets)]
                assert words == [f"r{r}" for r in rows.tolist()]
        except BaseException as exc:  # (reported below)
            errors.append(exc)

    was = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: the cache's races show
    try:
        threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(was)
    assert not errors, errors[0]
    assert table._held_rows == sum(table._spans.rows(s) for s in table._cache)
    table.close()
