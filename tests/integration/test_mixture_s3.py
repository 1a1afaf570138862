"""A pre-training mixture with shards on S3 (moto on 127.0.0.1) and on local disk:
Megatron int32 ids checked against a 128k vocabulary, a curriculum that switches
weights at a step, host slices and a resume across the switch, all bit for bit the
batches of the same mixture read from local copies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.errors import DataError
from headrace.formats import TokenSource, write_megatron_index
from headrace.pipeline import Loader, Mixture
from headrace.testing import assert_resume_exact, batch_digest

pytestmark = pytest.mark.integration

VOCAB = 128_000
B = 16
KW: dict[str, Any] = {
    "context": 64,
    "window_bytes": 64 << 10,
    "block_bytes": 16 << 10,
    "vocab_size": VOCAB,
}
SIZES = {"web0": 40_000, "web1": 30_000, "code": 20_000, "math": 8_000}


@pytest.fixture(scope="module")
def root(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Megatron shards under ``root`` and, but for ``math``, as objects under ``mix/``."""
    root = tmp_path_factory.mktemp("mix")
    client = s3.server.info.boto3_client()
    for i, (name, n) in enumerate(SIZES.items()):
        path = root / f"{name}.bin"
        np.random.default_rng(i).integers(0, VOCAB, n).astype(np.int32).tofile(path)
        write_megatron_index(path.with_suffix(".idx"), np.int32, np.full(n // 1000, 1000))
        if name != "math":
            for p in (path, path.with_suffix(".idx")):
                client.put_object(Bucket=BUCKET, Key=f"mix/{p.name}", Body=p.read_bytes())
    return root


def mixture(s3: S3Fixture, root: Path, *, remote: bool) -> Mixture:
    def where(name: str) -> str:
        return f"s3://{BUCKET}/mix/{name}.bin" if remote else str(root / f"{name}.bin")

    def source(*names: str, local: bool = False) -> TokenSource:
        opts = options(s3) if remote and not local else None
        paths = [str(root / f"{n}.bin") if local else where(n) for n in names]
        return TokenSource(paths, store_options=opts, **KW)

    return Mixture(
        {
            "web": source("web0", "web1"),
            "code": source("code"),
            "math": source("math", local=True),  # local beside the S3 ones
        },
        {"web": 0.8, "code": 0.2, "math": 0.0},  # math enters at step 6
        batch_size=B,
        schedule={6: {"web": 0.5, "code": 0.25, "math": 0.25}},
    )


def test_a_curriculum_on_s3_reads_the_local_batches_on_1_and_4_hosts(
    s3: S3Fixture, root: Path
) -> None:
    with Loader(mixture(s3, root, remote=False), batch_size=B, seed=3, steps=14) as ld:
        local = batch_digest(ld)
    for world in (1, 4):
        parts = []
        for rank in range(world):
            with Loader(
                mixture(s3, root, remote=True),
                batch_size=B,
                seed=3,
                steps=14,
                rank=rank,
                world_size=world,
            ) as ld:
                parts.append([{k: v.copy() for k, v in b.items()} for b in ld])
        steps = [
            {k: np.concatenate([p[t][k] for p in parts]) for k in parts[0][t]} for t in range(14)
        ]
        assert batch_digest(steps) == local
        assert not (np.concatenate([s["source"] for s in steps[:6]]) == 2).any()


def test_a_resume_across_the_switch_on_s3(s3: S3Fixture, root: Path) -> None:
    assert_resume_exact(
        lambda: Loader(mixture(s3, root, remote=True), batch_size=B, seed=3, steps=10),
        steps=10,
        resume_at=[5, 6, 7],
    )


def test_an_id_past_the_vocabulary_on_s3_is_named_by_its_url(s3: S3Fixture, root: Path) -> None:
    tokens = np.fromfile(root / "code.bin", dtype=np.int32)
    tokens[100:] = VOCAB + 5  # every sample past the first few holds one
    key = "bad/code.bin"
    client = s3.server.info.boto3_client()
    client.put_object(Bucket=BUCKET, Key=key, Body=tokens.tobytes())
    client.put_object(Bucket=BUCKET, Key="bad/code.idx", Body=(root / "code.idx").read_bytes())
    src = TokenSource(f"s3://{BUCKET}/{key}", store_options=options(s3), **KW)
    with (
        Loader(src, batch_size=B, seed=1, steps=3) as ld,
        pytest.raises(
            DataError, match=rf"s3://{BUCKET}/{key}: token offset .*: token id {VOCAB + 5} is"
        ),
    ):
        for _ in ld:
            pass
