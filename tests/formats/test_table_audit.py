"""Every column type a Hugging Face dataset holds, written by pyarrow into Parquet and
Arrow IPC files of uneven row groups / record batches, read by a TableSource under every
shuffle mode and batch size: the values are pyarrow's own reading of the same rows, or
the column is refused by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from _table_battery import (
    CHUNKS,
    check_source,
    full_table,
    read_names,
    read_reference,
    write_arrow,
    write_parquet,
)

from headrace.errors import FormatError
from headrace.formats import TableSource

TABLE = full_table()
NAMES = read_names(TABLE)


def _write(kind: str, path: Path, table: pa.Table, chunks: tuple[int, ...] = CHUNKS) -> Path:
    if kind == "parquet":
        return write_parquet(path.with_suffix(".parquet"), table, chunks)
    return write_arrow(path.with_suffix(".arrow"), table, chunks, stream=kind == "stream")


KINDS = ["parquet", "arrow", "stream"]


@pytest.fixture(scope="module")
def battery(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("battery")
    out = {}
    for kind in KINDS:
        out[kind] = _write(kind, root / f"full-{kind}", TABLE)
        # A slice of a slice: buffers and offsets that do not start at 0 when written.
        out[f"{kind}-sliced"] = _write(kind, root / f"sliced-{kind}", TABLE.slice(11, 200), (50, 150))
    return out


@pytest.mark.parametrize("variant", ["", "-sliced"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_column_type_reads_as_pyarrow_reads_it(
    battery: dict[str, Path], kind: str, variant: str
) -> None:
    path = battery[kind + variant]
    ref = read_reference(path)
    assert check_source(path, ref, NAMES) > ref.num_rows


@pytest.mark.parametrize("kind", KINDS)
def test_an_empty_table_is_refused_and_an_empty_file_beside_others_is_read_around(
    kind: str, tmp_path: Path
) -> None:
    empty = _write(kind, tmp_path / "a-empty", TABLE.slice(0, 0), ())
    with pytest.raises(FormatError, match=r"a-empty\.\w+: empty dataset: 1 file\(s\), 0 rows"):
        TableSource(empty, columns=["i64"])
    full = _write(kind, tmp_path / "b-full", TABLE)
    check_source([empty, full], read_reference(full), NAMES)
