"""An llm.c shard (read as one byte range of itself) changed under an open TokenSource
(s49): refused with advice for its kind (reopen the source), not a table's token lists
(call table_token_files again), which a table's Arrow shards still get."""

from __future__ import annotations

import os
from contextlib import closing
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from headrace.errors import ReadEOFError, StorageError
from headrace.formats import TokenSource, table_token_files

KW = {"context": 8, "window_bytes": 8 << 10, "block_bytes": 4096}


def _shard(path: Path, seed: int, n: int = 3000) -> Path:
    """An llm.c shard (magic 20240520, version 1: uint16 tokens), as llm.c writes one."""
    header = np.zeros(256, dtype=np.int32)
    header[:3] = 20240520, 1, n
    tokens = np.random.default_rng(seed).integers(3, 50_000, n).astype(np.uint16)
    path.write_bytes(header.tobytes() + tokens.tobytes())
    return path


def _refused(src: TokenSource) -> str:
    with pytest.raises(StorageError) as got:
        src.read(0, np.arange(4))
    return str(got.value)


def test_an_llmc_shard_replaced_under_the_source_says_reopen_the_source(tmp_path: Path) -> None:
    path = _shard(tmp_path / "fineweb_train_000001.bin", 0)
    with closing(TokenSource(path, **KW)) as src:
        assert src.files[0].format == "llmc"
        os.replace(_shard(tmp_path / "new.bin", 9), path)
        said = _refused(src)
    assert f"{path}: the llm.c shard changed since the source opened it" in said
    assert "reopen the source" in said
    assert "table_token_files" not in said and "token lists" not in said


def test_an_llmc_shard_written_in_place_says_reopen_the_source(tmp_path: Path) -> None:
    path = _shard(tmp_path / "s.bin", 0)
    with closing(TokenSource(path, **KW)) as src:
        st = path.stat()
        with open(path, "r+b") as f:  # the same file, new tokens (same size)
            f.seek(1024)
            f.write(np.arange(3, 103, dtype=np.uint16).tobytes())
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        said = _refused(src)
    assert "written to" in said and "reopen the source" in said
    assert "table_token_files" not in said


def test_an_llmc_shard_cut_short_says_reopen_the_source(tmp_path: Path) -> None:
    path = _shard(tmp_path / "s.bin", 0)
    with closing(TokenSource(path, **KW)) as src:
        os.truncate(path, 1024 + 2000)
        with pytest.raises(ReadEOFError) as got:
            src.read(0, np.arange(4))
    said = str(got.value)
    assert f"{path}: the llm.c shard's tokens end at byte 7024 but the file has 3024" in said
    assert "reopen the source" in said and "token lists" not in said


def test_a_tables_arrow_shard_replaced_says_call_table_token_files(tmp_path: Path) -> None:
    def write(path: Path, seed: int) -> Path:
        rng = np.random.default_rng(seed)
        ids = [rng.integers(0, 1000, 50).astype(np.int32) for _ in range(40)]
        table = pa.table({"input_ids": ids})
        with pa.ipc.new_file(str(path), table.schema) as w:
            w.write_table(table)
        return path

    path = write(tmp_path / "data-00000-of-00001.arrow", 0)
    with closing(TokenSource(table_token_files(path), **KW)) as src:
        os.replace(write(tmp_path / "new.arrow", 1), path)
        said = _refused(src)
    assert "call table_token_files again" in said and "reopen the source" not in said
