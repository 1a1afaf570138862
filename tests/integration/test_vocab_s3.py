"""``vocab_size=`` on object storage (moto): the check is on the delivered arrays, so a
``save_to_disk`` folder on S3 is refused at the row a local copy is, naming the object."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.errors import FormatError
from headrace.formats import TableSource, TokenSource, table_token_files

pytestmark = pytest.mark.integration

V = 32_000
URL = f"s3://{BUCKET}/vocab/ds"


def test_a_table_and_its_packed_stream_on_s3_name_the_object(s3: S3Fixture, tmp_path: Path) -> None:
    import datasets

    rng = np.random.default_rng(0)
    ids = [rng.integers(0, V, rng.integers(1, 64)).tolist() for _ in range(300)]
    ids[220][1] = V + 11
    root = tmp_path / "ds"
    datasets.Dataset.from_dict({"input_ids": ids}).save_to_disk(str(root), num_shards=2)
    client = s3.server.info.boto3_client()
    for p in root.iterdir():
        client.put_object(Bucket=BUCKET, Key=f"vocab/ds/{p.name}", Body=p.read_bytes())
    shard = "data-00001-of-00002.arrow"

    def messages(where: str, **kw: object) -> list[str]:
        table = TableSource(
            where, columns=["input_ids"], width=64, shuffle=False, vocab_size=V, **kw
        )  # type: ignore[arg-type]
        packed = TokenSource(
            table_token_files(where, **kw),  # type: ignore[arg-type]
            context=16,
            shuffle=False,
            vocab_size=V,
            **kw,  # type: ignore[arg-type]
        )
        out = []
        for src, n in ((table, 300), (packed, packed.samples_per_epoch)):
            with pytest.raises(FormatError) as info:
                src.read(0, np.arange(n))
            out.append(str(info.value))
            src.close()
        return out

    local = messages(str(root))
    remote = messages(URL, store_options=options(s3))
    assert f"{URL}/{shard}: column 'input_ids', row 70 (row 220 of the table, sample " in remote[0]
    # Row 220 of the dataset is row 70 of its second shard of 150 rows (it said "row 220").
    assert f"{URL}/{shard}: column 'input_ids', row 70, position 1 " in remote[1]
    assert "(row 220 of the dataset, token offset" in remote[1]
    for a, b in zip(local, remote, strict=True):
        assert f"token id {V + 11} is outside" in b
        assert a.replace(str(root), URL) == b
