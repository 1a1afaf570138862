"""MDSSource on S3 (moto on 127.0.0.1), bug hunt s48: an index's names read alike
from a prefix and from a local folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from _mds_files import write_mds
from headrace.formats import MDSSource

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("compression", [None, "gz"])
def test_merged_parts_named_under_dot_read_from_s3_as_from_the_folder(
    s3: S3Fixture, tmp_path: Path, compression: str | None
) -> None:
    # Streaming's merge_index joins each part's folder name to its shards' names:
    # "0/shard.00000.mds", or "./shard.00000.mds" for a part's index.json given bare.
    # The folder read both; the prefix refused the "./" ones as not stored there.
    shards = []
    for part, folder in enumerate(["0", "."]):
        write_mds(
            tmp_path / f"p{part}",
            {"a": "int", "t": "str"},
            [{"a": 100 * part + k, "t": "y" * k} for k in range(5)],
            per_shard=2,
            compression=compression,
        )
        for entry in json.loads((tmp_path / f"p{part}" / "index.json").read_text())["shards"]:
            for key in ("raw_data", "zip_data"):
                if entry.get(key):
                    name = entry[key]["basename"]
                    entry[key]["basename"] = f"{folder}/{name}"
                    stored = tmp_path / f"p{part}" / name
                    if stored.exists():  # (a compressed shard's raw_data is not stored)
                        (tmp_path / "ds" / folder).mkdir(parents=True, exist_ok=True)
                        stored.replace(tmp_path / "ds" / folder / name)
            shards.append(entry)
    (tmp_path / "ds" / "index.json").write_text(json.dumps({"shards": shards, "version": 2}))
    client = s3.server.info.boto3_client()
    prefix = f"mds-s48/dot-{compression}"
    for path in sorted((tmp_path / "ds").rglob("*")):
        if path.is_file():
            key = f"{prefix}/{path.relative_to(tmp_path / 'ds').as_posix()}"
            client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
    options = {**s3.options(), "retry": FAST_RETRY}
    want = [*range(5), *range(100, 105)]
    for root, kw in ((str(tmp_path / "ds"), {}), (f"s3://{BUCKET}/{prefix}", options)):
        with MDSSource(root, shuffle=False, store_options=kw or None) as src:
            assert src.read(0, np.arange(10))["a"].tolist() == want
