"""Arrow's canonical extension types of strings and bytes (``pa.json_()``, ``pa.uuid()``,
pyarrow >= 18) read as the values they hold: a JSON column's text as bytes, a UUID's
16 bytes, as a string column and a ``fixed_size_binary[16]`` one read."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from _table_battery import KINDS, write
from headrace.formats import Table

N = 30
pytestmark = pytest.mark.skipif(not hasattr(pa, "uuid"), reason="pyarrow < 18")


@pytest.mark.parametrize("kind", KINDS)
def test_json_and_uuid_columns_read_as_their_bytes(tmp_path: Path, kind: str) -> None:
    texts = [f'{{"a": {i}}}' for i in range(N)]
    ids = [uuid.UUID(int=i * 7919) for i in range(N)]
    table = pa.table({"j": pa.array(texts, pa.json_()), "u": pa.array(ids, pa.uuid())})
    path = write(kind, tmp_path / "t", table, (4, 0, 26))
    rows = [29, 0, 3, 4]
    for where in (str(path), path.as_uri()):
        out = Table.open(where).read_rows(rows)
        j = out["j"]
        got = [
            bytes(j.values[a:b]).decode()
            for a, b in zip(j.offsets[:-1], j.offsets[1:], strict=True)
        ]
        assert got == [texts[r] for r in rows], where
        want = np.frombuffer(b"".join(ids[r].bytes for r in rows), np.uint8).reshape(4, 16)
        np.testing.assert_array_equal(out["u"], want)
