"""The once battery (tests/pipeline/test_once_battery*.py) on object storage: each source
kind over the battery's data on S3 (moto) has the local copy's epoch size and rows, and
its batches, read by 3 hosts with read-ahead and resumed on 2, are the local copy's on one;
an exact pass on 2 hosts marks each sample valid once; its fingerprint is the local one's
(a state moves between the two)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("datasets")
pytest.importorskip("h5py")

from s3util import BUCKET, S3Fixture, store_options

from _once_data import build, row_digests
from headrace.formats import (
    FileSource,
    MDSSource,
    PaddedRows,
    PairRows,
    TableSource,
    TokenSource,
    table_token_files,
)
from headrace.pipeline import Loader

pytestmark = pytest.mark.integration

Make = Callable[[str, dict[str, Any]], Any]

#: Each kind, made over ``where`` (a local folder or an ``s3://`` prefix) with ``kw``.
KINDS: dict[str, Make] = {
    "tokens": lambda w, kw: TokenSource(
        f"{w}/tok/*.bin", context=8, dtype="uint16", window_bytes=64, **kw
    ),
    "megatron": lambda w, kw: TokenSource(f"{w}/meg/m.bin", context=8, window_bytes=256, **kw),
    "padded": lambda w, kw: PaddedRows(
        f"{w}/rows_r/tok.npy",
        f"{w}/rows_r/mask.npy",
        context=16,
        shuffle="window",
        window_rows=8,
        empty_rows="keep",
        **kw,
    ),
    "pairs": lambda w, kw: PairRows(
        {"chosen": f"{w}/pairs/chosen.tok.bin", "rejected": f"{w}/pairs/rejected.tok.bin"},
        shuffle="window",
        window_rows=6,
        empty_rows="keep",
        **kw,
    ),
    "parquet": lambda w, kw: TableSource(
        f"{w}/parquet/*.parquet", width=12, shuffle="window", window_rows=8, **kw
    ),
    "arrow": lambda w, kw: TableSource(f"{w}/hf", width=12, shuffle="window", window_rows=9, **kw),
    "packed": lambda w, kw: TokenSource(
        table_token_files(f"{w}/hf", **kw), context=4, window_bytes=64, **kw
    ),
    "npy": lambda w, kw: FileSource(f"{w}/npy1/", format="npy", shuffle="samples", **kw),
    "npy_rows": lambda w, kw: FileSource(
        f"{w}/npyn/", format="npy", samples_per_file="header", npy_ranges_above=1, **kw
    ),
    "npz": lambda w, kw: FileSource(f"{w}/npz/", format="npz", samples_per_file="header", **kw),
    "png": lambda w, kw: FileSource(f"{w}/png/", format="png", **kw),
    "jpeg": lambda w, kw: FileSource(f"{w}/jpeg/", format="jpeg", **kw),
    "hdf5_ranges": lambda w, kw: FileSource(
        f"{w}/h5/",
        format="hdf5",
        samples_per_file="header",
        datasets=("x",),
        shuffle="samples",
        hdf5_ranges_above=1,
        **kw,
    ),
    "tar": lambda w, kw: FileSource(f"{w}/tar/", format="tar", shuffle="samples", **kw),
    "tfrecord": lambda w, kw: FileSource(
        f"{w}/tfr/", format="tfrecord", shuffle="samples", tfrecord_ranges_above=1, **kw
    ),
    "array_record": lambda w, kw: FileSource(
        f"{w}/ar/", format="array_record", shuffle="samples", decode=False, **kw
    ),
    "mds": lambda w, kw: MDSSource(f"{w}/mds", shuffle="window", **kw),
}


@pytest.fixture(scope="module")
def root(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The battery's data under ``root``, the same bytes under ``once/`` of the bucket."""
    d = tmp_path_factory.mktemp("once-s3")
    build(d)
    client = s3.server.info.boto3_client()
    for p in d.rglob("*"):
        if p.is_file():
            client.put_object(
                Bucket=BUCKET, Key=f"once/{p.relative_to(d).as_posix()}", Body=p.read_bytes()
            )
    return d


def _rows(loader: Loader, steps: int) -> list[list[str]]:
    it = iter(loader)
    return [row_digests(next(it)) for _ in range(steps)]


@pytest.mark.parametrize("kind", list(KINDS))
def test_s3_keeps_the_local_copys_stream(s3: S3Fixture, root: Path, kind: str) -> None:
    if kind == "array_record" and not (root / "ar").exists():
        pytest.skip("pip install array-record (the test extra has it)")
    make = KINDS[kind]

    def local() -> Any:
        return make(str(root), {})

    def remote() -> Any:
        return make(f"s3://{BUCKET}/once", {"store_options": store_options(s3)})

    here, there = local(), remote()
    n = here.samples_per_epoch
    assert there.samples_per_epoch == n
    assert row_digests(there.read(3, np.arange(3 * n))) == row_digests(
        here.read(3, np.arange(3 * n))
    )
    with Loader(local(), batch_size=6, seed=3) as ld:
        plain = _rows(ld, 12)
        fingerprint = ld.state_dict()["fingerprint"]
    hosts = []
    for rank in range(3):
        with Loader(remote(), batch_size=6, seed=3, rank=rank, world_size=3, chunk_steps=2) as ld:
            hosts.append(_rows(ld, 5))
            state = ld.state_dict()
    assert state["fingerprint"] == fingerprint  # a state moves between the copies
    tail = []
    for rank in range(2):
        with Loader(remote(), batch_size=6, rank=rank, world_size=2, chunk_steps=3) as ld:
            ld.load_state_dict(state)
            tail.append(_rows(ld, 7))
    joined = [[d for h in hosts for d in h[t]] for t in range(5)]
    joined += [[d for h in tail for d in h[t]] for t in range(7)]
    assert joined == plain
    seen: list[int] = []
    for rank in range(2):
        with Loader(remote(), batch_size=4, rank=rank, world_size=2, epochs=1) as ld:
            for b in ld:
                seen += b["sample"][b["valid"]].tolist()
    assert sorted(seen) == list(range(n))
    for src in (here, there):
        getattr(src, "close", lambda: None)()
