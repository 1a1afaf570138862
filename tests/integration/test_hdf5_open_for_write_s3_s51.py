"""An HDF5 object its writer had open when it was uploaded (a job's output synced
mid-write) is refused by URL, read whole or by ranges: until 2026-12-07 its samples not
yet written came as the fill value (tests/formats/test_hdf5_open_for_write_s51.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from headrace.errors import FormatError
from headrace.formats import FileSource
from headrace.pipeline import Loader

pytestmark = pytest.mark.integration

ROWS = 16


@pytest.mark.parametrize(
    "options",
    [
        {"samples_per_file": "header"},
        {"samples_per_file": ROWS},
        {"samples_per_file": ROWS, "shuffle": "samples", "hdf5_ranges_above": 0},
    ],
    ids=["header", "whole", "ranges"],
)
def test_an_object_uploaded_mid_write_is_refused_by_url(
    s3: S3Fixture, tmp_path: Path, options: dict[str, object]
) -> None:
    client = s3.server.info.boto3_client()
    done, work, copy = tmp_path / "a.h5", tmp_path / "b.writing", tmp_path / "b.h5"
    with h5py.File(done, "w", libver="latest") as f:
        f.create_dataset("data", data=np.ones((ROWS, 8), np.float32), chunks=(2, 8))
    with h5py.File(work, "w", libver="latest") as f:
        ds = f.create_dataset("data", shape=(ROWS, 8), dtype=np.float32, chunks=(2, 8))
        ds[: ROWS // 2] = 2.0
        f.flush()
        shutil.copyfile(work, copy)
    prefix = f"h5writing-{'-'.join(map(str, options.values()))}"
    for path in (done, copy):
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{path.name}", Body=path.read_bytes())
    store = {**s3.options(), "retry": FAST_RETRY}
    with pytest.raises(FormatError) as got:
        src = FileSource(f"s3://{BUCKET}/{prefix}", store_options=store, format="hdf5",
                         datasets=["data"], **options)  # fmt: skip
        with Loader(src, batch_size=4, seed=0, steps=2 * ROWS // 4) as loader:
            for _ in loader:
                pass
    text = str(got.value)
    assert text.startswith(f"s3://{BUCKET}/{prefix}/b.h5: "), text
    assert "marked open for writing" in text and "h5clear" in text, text
