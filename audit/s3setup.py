"""Start moto on 127.0.0.1 and upload the audit's data set (as the integration tests do)."""

from __future__ import annotations

from pathlib import Path

from headrace.emulate import LocalS3

BUCKET = "audit"


def start(root: Path):
    server = LocalS3().start()
    server.create_bucket(BUCKET)
    client = server.info.boto3_client()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            client.put_object(Bucket=BUCKET, Key=str(p.relative_to(root)), Body=p.read_bytes())
    opts = server.info.store_options()
    return server, {
        "options": opts,
        "files": f"s3://{BUCKET}/npy",
        "tokens": f"s3://{BUCKET}/train.bin",
        "rows": f"s3://{BUCKET}/rows.npy",
        "table": f"s3://{BUCKET}/table/part-0.parquet",
    }
