"""MDSSource on S3 (moto on 127.0.0.1), bug hunt s47: refusals worded for object
storage, as the local ones are for a folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from _mds_files import write_mds
from headrace.errors import ObjectNotFoundError
from headrace.formats import MDSSource

pytestmark = pytest.mark.integration


def test_a_shard_missing_from_a_prefix_is_not_said_to_be_a_streaming_cache(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # The local refusal's advice (a Streaming cache folder holds only the shards it has
    # downloaded) was given for an S3 prefix too, where no Streaming cache is.
    paths = write_mds(tmp_path, {"a": "int"}, [{"a": k} for k in range(4)], per_shard=2)
    paths[1].unlink()
    client = s3.server.info.boto3_client()
    for p in sorted(tmp_path.iterdir()):
        client.put_object(Bucket=BUCKET, Key=f"mds-s47/miss/{p.name}", Body=p.read_bytes())
    options = {**s3.options(), "retry": FAST_RETRY}
    with pytest.raises(ObjectNotFoundError) as caught:
        MDSSource(f"s3://{BUCKET}/mds-s47/miss", store_options=options)
    said = str(caught.value)
    assert "mds-s47/miss: index.json lists 1 shard(s) not stored there: shard.00001.mds" in said
    assert "Streaming cache" not in said
    assert "deleted after the index was written, or never uploaded" in said
    with pytest.raises(ObjectNotFoundError, match=r"a Streaming cache folder holds only"):
        MDSSource(tmp_path)  # the local folder's advice stays
