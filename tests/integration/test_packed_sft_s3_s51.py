"""An SFT table's unread ``labels`` column on S3 (moto) is warned of as locally."""

from __future__ import annotations

import warnings

import pyarrow as pa
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.formats import table_token_files

pytestmark = pytest.mark.integration


def _put(s3: S3Fixture, name: str, table: pa.Table) -> str:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    key = f"packed-sft-s51/{name}"
    s3.server.info.boto3_client().put_object(Bucket=BUCKET, Key=key, Body=bytes(sink.getvalue()))
    return f"s3://{BUCKET}/{key}"


def test_an_unread_labels_column_on_s3_is_warned_of(s3: S3Fixture) -> None:
    ids = pa.array([[5, 6, 7], [8, 9]], pa.list_(pa.int32()))
    labels = pa.array([[-100, 6, 7], [-100, 9]], pa.list_(pa.int32()))
    sft = _put(s3, "sft.arrow", pa.table({"input_ids": ids, "labels": labels}))
    with pytest.warns(UserWarning, match=r"sft\.arrow: column 'labels' is not read"):
        (tf,) = table_token_files(sft, store_options=options(s3))
    assert tf.num_tokens == 5
    plain = _put(s3, "plain.arrow", pa.table({"input_ids": ids}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table_token_files(plain, store_options=options(s3))
