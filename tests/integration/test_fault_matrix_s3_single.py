"""Token, row and Parquet objects on S3 deleted, grown or shrunk mid-run (their replacement
by one of the same size is tested in test_tokens_s3, test_rows_s3 and test_tables_s3): the
next read of bytes not read before names the object and range, and how it changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.errors import ObjectNotFoundError, ReadEOFError, StorageError
from headrace.formats import PaddedRows, TableSource, TokenSource

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    root = tmp_path_factory.mktemp("single")
    rng = np.random.default_rng(0)
    rng.integers(0, 50_000, 1 << 20, dtype=np.uint16).tofile(root / "tok.bin")
    np.save(root / "rows.npy", rng.integers(0, 50_000, (4096, 65), dtype=np.int32))
    table = pa.table({"x": np.arange(20_000, dtype=np.int64)})
    pq.write_table(table, root / "t.parquet", row_group_size=1000, compression="none")
    return root


def _open(name: str, url: str, store: dict[str, Any]) -> Any:
    if name == "tok.bin":
        return TokenSource(url, dtype="uint16", context=64, shuffle=False, store_options=store,
                           block_bytes=64 << 10)  # fmt: skip
    if name == "rows.npy":
        return PaddedRows(url, context=64, shuffle=False, store_options=store)
    return TableSource(url, columns=["x"], shuffle=False, store_options=store)


@pytest.mark.parametrize("name", ["tok.bin", "rows.npy", "t.parquet"])
@pytest.mark.parametrize(
    ("change", "error", "said"),
    [
        ("deleted", ObjectNotFoundError, "no such object"),
        ("grown", StorageError, "the object changed while open"),
        # A shorter object ends before a range (a ReadEOFError, rows) or answers it
        # whole with its new size and ETag (tokens, Parquet): named as changed either way.
        ("shrunk", (StorageError, ReadEOFError), "the object changed while open"),
    ],
)
def test_an_object_deleted_or_resized_mid_run_is_named_with_the_range(
    s3: S3Fixture, files: Path, name: str, change: str, error: Any, said: str
) -> None:
    body = (files / name).read_bytes()
    key = f"single/{change}/{name}"
    client = s3.server.info.boto3_client()
    client.put_object(Bucket=BUCKET, Key=key, Body=body)
    src = _open(name, f"s3://{BUCKET}/{key}", options(s3))
    try:
        src.read(0, np.arange(4))
        if change == "deleted":
            client.delete_object(Bucket=BUCKET, Key=key)
        else:
            client.put_object(
                Bucket=BUCKET,
                Key=key,
                Body=body + bytes(4096) if change == "grown" else body[: len(body) // 2],
            )
        with pytest.raises(error) as info:
            src.read(0, np.arange(3000, 3032))  # far from the first rows: not read yet
        message = str(info.value)
        assert f"s3://{BUCKET}/{key}, bytes [" in message, message
        assert said in message, message
    finally:
        src.close()
