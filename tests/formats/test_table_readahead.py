"""A few rows of a local Arrow file bring in their pages, not the file.

Measured with ``mincore`` after evicting the file's pages: pyarrow's read of the
whole map advised ``WILLNEED`` (8 MiB, the device's readahead size), and every
page fault of the header walk or the gather read the kernel's read-around about
it (``read_ahead_kb``: 128 KiB by default, 8 MiB on some disks), which over
record batches of 64 KiB is every page of the file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")

from _cold import evict  # noqa: E402
from _cold import resident_bytes as _resident_bytes  # noqa: E402
from headrace.formats import Ragged, Table  # noqa: E402
from headrace.io import PAGE  # noqa: E402

BATCHES = 80
# A row's ids: 512 int32, 2 KiB; a record batch ~128 KiB (wider than the map fill's
# 64 KiB gaps between the runs it reads as one); the file ~10 MiB.
ROWS = 64
WIDTH = 512


def _table(dictionary: bool) -> Any:
    rng = np.random.default_rng(0)
    out = []
    for b in range(BATCHES):
        offs = pa.array(np.arange(ROWS + 1, dtype=np.int32) * WIDTH)
        values = pa.array(rng.integers(0, 50_000, ROWS * WIDTH, np.int32))
        ids = pa.ListArray.from_arrays(offs, values)
        label = pa.array(np.arange(b * ROWS, (b + 1) * ROWS, dtype=np.int64))
        cols, names = [ids, label], ["ids", "label"]
        if dictionary:  # pyarrow's own reader reads it (headrace's walk does not)
            cols.append(pa.array(["a", "b"] * (ROWS // 2)).dictionary_encode())
            names.append("kind")
        out.append(pa.record_batch(cols, names=names))
    return pa.Table.from_batches(out)


def _write(path: Path, table: Any, kind: str) -> None:
    new = pa.ipc.new_stream if kind == "stream" else pa.ipc.new_file
    with pa.OSFile(str(path), "wb") as f, new(f, table.schema) as w:
        for b in table.to_batches():
            w.write_batch(b)
    evict(path)


def _digest(cols: dict[str, Any]) -> str:
    h = hashlib.sha256()
    for name in ("ids", "label"):
        col = cols[name]
        h.update(name.encode())
        for a in (col.values, col.offsets) if isinstance(col, Ragged) else (col,):
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _expected(table: Any, rows: np.ndarray) -> str:
    """The same digest from pyarrow's rows, read in memory."""
    got = table.take(pa.array(rows))
    ids = got.column("ids").combine_chunks()
    h = hashlib.sha256(b"ids")
    lens = np.diff(ids.offsets.to_numpy())
    h.update(ids.flatten().to_numpy().tobytes())
    h.update(np.concatenate([[0], np.cumsum(lens)]).astype(np.int64).tobytes())
    h.update(b"label")
    h.update(got.column("label").to_numpy().tobytes())
    return h.hexdigest()


@pytest.mark.parametrize(
    ("kind", "dictionary"), [("stream", False), ("file", False), ("stream", True)]
)
def test_a_few_rows_bring_in_their_pages_not_the_file(
    tmp_path: Path, kind: str, dictionary: bool
) -> None:
    table = _table(dictionary)
    path = tmp_path / f"data.{kind}.arrow"
    _write(path, table, kind)
    size = path.stat().st_size
    rows = np.random.default_rng(1).choice(BATCHES * ROWS, 32, replace=False)
    with Table.open(path) as tb:
        opened = _resident_bytes(path)
        cols = tb.read_rows(rows, ["ids", "label"])
        read = _resident_bytes(path)
    assert _digest(cols) == _expected(table, rows)
    # Opening reads each record batch's header (a page or two, and a dictionary's
    # message); 32 rows add their pages (the fill reads the gaps of up to 64 KiB
    # between a row's offsets and its ids as well): a record batch each at most.
    # Before: every page of the file at open.
    assert opened <= BATCHES * 2 * PAGE, (opened, size)
    assert read - opened <= 32 * (size // BATCHES), (read, opened, size)
