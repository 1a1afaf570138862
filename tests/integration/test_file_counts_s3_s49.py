"""Header counts under ``on_corrupt="replace"`` on S3 (s49): a damaged header is kept
aside with a count of 0, as the local files' is; a missing object still raises."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from headrace.errors import DataError, FormatError, StorageError
from headrace.formats._file_counts import header_counts
from headrace.formats._file_list import list_files
from headrace.formats._files import file_format

pytestmark = pytest.mark.integration


def test_damaged_headers_on_s3_are_kept_aside_as_local_ones(s3: S3Fixture, tmp_path: Path) -> None:
    client = s3.server.info.boto3_client()
    for i in range(5):
        buf = io.BytesIO()
        np.save(buf, np.zeros((i + 1, 2), np.float32))
        body = buf.getvalue() if i not in (1, 3) else buf.getvalue()[:20]
        client.put_object(Bucket=BUCKET, Key=f"s49-corrupt/f{i}.npy", Body=body)
    options = {**s3.options(), "retry": FAST_RETRY}
    files = list_files(f"s3://{BUCKET}/s49-corrupt", extensions=(".npy",), store_options=options)
    try:
        corrupt: dict[int, DataError] = {}
        counts, _ = header_counts(files, file_format("npy"), None, 4, corrupt=corrupt)
        assert counts.tolist() == [1, 0, 3, 0, 5] and sorted(corrupt) == [1, 3]
        assert all(isinstance(e, FormatError) for e in corrupt.values())
        assert "s49-corrupt/f1.npy" in str(corrupt[1])
        # An object deleted since the listing is storage, not damage: raised.
        client.delete_object(Bucket=BUCKET, Key="s49-corrupt/f2.npy")
        with pytest.raises(StorageError, match=r"s49-corrupt/f2\.npy"):
            header_counts(files, file_format("npy"), None, 4, corrupt={})
    finally:
        files.close()
