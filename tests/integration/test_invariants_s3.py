"""Object storage gives the local copy's batches, drawn at random: sources (NPY files of
two samples, a token file, padded rows, a Parquet file, an Arrow stream), requests in
flight, shuffles, host counts before and after a resume, and transient faults (5xx,
dropped connections, cut bodies) in front of a real S3 endpoint (moto through the
latency proxy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from s3util import BUCKET, FAST_RETRY, S3Fixture

from _invariant_settings import invariant_settings
from _row_files import padded_rows
from headrace.emulate import FaultRule, LatencyProxy
from headrace.formats import (
    FileSource,
    PaddedRows,
    TableSource,
    TokenSource,
    synthetic_arrays,
)
from headrace.formats import write_sample_file as write
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

STEPS = 8
BATCH = 12  # splits over 1 to 4 hosts


@pytest.fixture(scope="module")
def root(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local copy under ``root``, the same bytes under ``invariants/`` of the bucket."""
    d = tmp_path_factory.mktemp("invariants-s3")
    (d / "npy").mkdir()
    for i in range(9):
        arrays = synthetic_arrays("npy", seed=i, shape=(5, 4), samples_per_file=2)
        write("npy", d / "npy" / f"s{i:02d}.npy", arrays)
    rng = np.random.default_rng(0)
    rng.integers(0, 50_000, 2_500, dtype=np.uint16).tofile(d / "tok.bin")
    padded_rows(d, 61, 33, seed=1, prompt_mod=5, ext=".npy", empty_every=9)
    lengths = rng.integers(1, 33, 83)
    table = pa.table(
        {"input_ids": [rng.integers(1, 50_000, n).tolist() for n in lengths], "label": lengths}
    )
    pq.write_table(table, d / "t.parquet", row_group_size=20)
    with pa.ipc.new_stream(d / "t.arrow", table.schema) as w:  # as datasets writes them
        for batch in table.to_batches(max_chunksize=15):
            w.write_batch(batch)
    client = s3.server.info.boto3_client()
    for p in d.rglob("*"):
        if p.is_file():
            key = f"invariants/{p.relative_to(d).as_posix()}"
            client.put_object(Bucket=BUCKET, Key=key, Body=p.read_bytes())
    return d


def _source(where: str, kind: str, shuffle: bool, in_flight: int, options: dict[str, Any]) -> Any:
    remote = where.startswith("s3://")
    kw: dict[str, Any] = {"store_options": options, "in_flight": in_flight} if remote else {}
    if kind == "files":
        return FileSource(f"{where}/npy", format="npy", samples_per_file=2, shuffle=shuffle, **kw)
    if kind in ("parquet", "arrow"):
        kw.pop("in_flight", None)
        return TableSource(
            f"{where}/t.{kind}",
            columns=["input_ids", "label"],
            width=32,
            shuffle="window" if shuffle else False,
            **kw,
        )
    if kind == "tokens":
        kw.pop("in_flight", None)
        return TokenSource(f"{where}/tok.bin", context=32, dtype="uint16", shuffle=shuffle, **kw)
    return PaddedRows(
        f"{where}/tok.npy",
        f"{where}/mask.npy",
        context=32,
        shuffle="window" if shuffle else False,
        window_rows=8 if shuffle else None,
        **kw,
    )


def _run(
    make: Any, seed: int, world: int, start: dict[str, Any] | None, steps: int
) -> tuple[list[dict[str, np.ndarray]], dict[str, Any]]:
    """``steps`` global batches (host slices joined) from ``start``, and the state after."""
    parts, state = [], {}
    for rank in range(world):
        with Loader(make(), batch_size=BATCH, seed=seed, rank=rank, world_size=world) as ld:
            if start is not None:
                ld.load_state_dict(start)
            it = iter(ld)
            parts.append([next(it) for _ in range(steps)])
            state = ld.state_dict()
    joined = [
        {k: np.concatenate([p[t][k] for p in parts]) for k in parts[0][t]} for t in range(steps)
    ]
    return joined, state


FAULTS = st.one_of(
    st.none(),
    st.builds(
        FaultRule,
        kind=st.sampled_from(["status", "drop", "truncate"]),
        status=st.sampled_from([500, 503]),
        every=st.integers(1, 4),
        limit=st.integers(1, 3),  # fewer than FAST_RETRY's 4 attempts
    ),
)


@invariant_settings(15)
@given(
    kind=st.sampled_from(["files", "tokens", "padded", "parquet", "arrow"]),
    shuffle=st.booleans(),
    in_flight=st.sampled_from([1, 2, 64]),
    seed=st.integers(0, 2**40),
    worlds=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    k=st.integers(0, STEPS),
    fault=FAULTS,
)
def test_s3_through_faults_gives_the_local_batches(
    s3: S3Fixture,
    proxy: LatencyProxy,
    root: Path,
    kind: str,
    shuffle: bool,
    in_flight: int,
    seed: int,
    worlds: tuple[int, int],
    k: int,
    fault: FaultRule | None,
) -> None:
    local, _ = _run(lambda: _source(str(root), kind, shuffle, 16, {}), seed, 1, None, STEPS)
    options = {**s3.options(), "endpoint": proxy.endpoint, "retry": FAST_RETRY}
    url = f"s3://{BUCKET}/invariants"
    proxy.set_faults([] if fault is None else [fault])
    proxy.reset_stats()
    try:

        def make() -> Any:
            return _source(url, kind, shuffle, in_flight, options)

        head, state = _run(make, seed, worlds[0], None, k)
        tail, _ = _run(make, seed, worlds[1], state, STEPS - k)
        stats = proxy.stats
    finally:
        proxy.set_faults([])
    assert batch_digest(head + tail) == batch_digest(local)
    # The faults fired as drawn (every ``every``-th request, ``limit`` at most): the bytes
    # above came through them.
    fired = 0 if fault is None else min(fault.limit or 0, stats.requests // fault.every)
    assert stats.requests > 0 and stats.faults == fired
