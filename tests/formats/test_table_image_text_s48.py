"""``images=`` naming a text column is refused when the source opens, whatever the
text's Arrow type: polars writes strings to IPC files as ``string_view``."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from headrace.errors import ConfigError
from headrace.formats import TableSource


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string(), pa.string_view()])
def test_images_naming_a_text_column_is_refused(tmp_path: Path, typ: pa.DataType) -> None:
    # A string_view column was taken, and its first row refused as "not a JPEG".
    table = pa.table({"caption": pa.array(["a cat", "a dog"], typ)})
    path = tmp_path / "t.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    with pytest.raises(ConfigError, match=rf"images names column 'caption' of type {typ}"):
        TableSource(str(path), images=["caption"])
