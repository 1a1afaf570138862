"""A new user's first `headrace check` of data that is not what the flag says (session 55).

The user tokenized with Hugging Face `datasets` and wrote Parquet or `save_to_disk`
Arrow files, then checked them the way README's token-file examples do, with
``--format tokens``. The refusal named Python's ``TokenSource(table_token_files(...))``
and ``TableSource(...)``, nothing the command line takes; it now also names the flags.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.cli import main

pa = pytest.importorskip("pyarrow")


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_a_table_checked_as_tokens_is_told_the_table_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    table = pa.table({"input_ids": [[1, 2, 3], [4, 5]]})
    if kind == "parquet":
        import pyarrow.parquet as pq

        path = tmp_path / "tokenized.parquet"
        pq.write_table(table, path)
    else:  # an Arrow IPC file, as pyarrow.feather and ipc.new_file write
        path = tmp_path / "tokenized.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
    assert main(["check", str(path), "--format", "tokens", "--dtype", "uint16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line, no traceback
    assert "not raw tokens" in err, err  # the refusal itself, as before
    assert "on the command line: check it as a table, --format table --columns input_ids" in err
    assert "--width N" in err, err
    # The line it names runs: the table is checked (rows padded to the width given).
    assert (
        main(["check", str(path), "--format", "table", "--columns", "input_ids", "--width", "4"])
        == 0
    )


def test_a_save_to_disk_arrow_stream_checked_as_tokens_is_refused(tmp_path: Path) -> None:
    # datasets' save_to_disk writes data-00000-of-00001.arrow as an IPC *stream* (no
    # ARROW1 magic). Checked as uint16 tokens it read "no problems": int64 ids as pairs
    # of uint16 (26939, 0, 12572, 0, ...), its schema's flatbuffers among them.
    rows = [list(range(i, i + 700)) for i in range(0, 7000, 700)]
    table = pa.table({"input_ids": rows})
    path = tmp_path / "data-00000-of-00001.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    assert main(["check", str(path), "--format", "tokens", "--dtype", "uint16"]) == 2
    from headrace.errors import FormatError
    from headrace.formats import TokenSource

    with pytest.raises(FormatError, match=r"data-00000-of-00001\.arrow: an Arrow IPC stream"):
        TokenSource(path, context=16, dtype="uint16")
