"""An exact evaluation pass (``Loader(epochs=1)``) over file datasets on S3 (moto): on 1-4
hosts the valid rows are each sample once, with the bytes of the same files read locally."""

from __future__ import annotations

from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from _exact_pass import check_exact, reference
from headrace.formats import FileSource, TokenSource, synthetic_arrays
from headrace.formats import write_sample_file as write
from headrace.pipeline import Loader

pytestmark = pytest.mark.integration

# name: (format, samples per file, files): 7 NPY files of 2 samples (n = 14), 11 JPEGs and
# 9 NPZ files: no n divides the batch of 12, and 9 < 12.
SETS = {"npy": ("npy", 2, 7), "jpeg": ("jpeg", 1, 11), "npz": ("npz", 1, 9)}
EXT = {"jpeg": "jpg"}


@pytest.fixture(scope="module")
def val_sets(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("eval-sets")
    client = s3.server.info.boto3_client()
    for name, (fmt, spf, files) in SETS.items():
        (root / name).mkdir()
        for i in range(files):
            arrays = synthetic_arrays(fmt, seed=100 + i, shape=(8, 6, 3), samples_per_file=spf)
            path = root / name / f"v{i:02d}.{EXT.get(fmt, fmt)}"
            write(fmt, path, arrays)
            client.put_object(Bucket=BUCKET, Key=f"eval/{name}/{path.name}", Body=path.read_bytes())
    return root


def source(name: str, where: str | Path, **kw: Any) -> FileSource:
    fmt, spf, _ = SETS[name]
    return FileSource(where, format=fmt, samples_per_file=spf, **kw)


@pytest.mark.parametrize("name", sorted(SETS))
def test_a_pass_over_s3_files_is_exact_and_equals_local(
    s3: S3Fixture, val_sets: Path, name: str
) -> None:
    options = {**s3.options(), "retry": FAST_RETRY}

    def remote() -> FileSource:
        return source(name, f"s3://{BUCKET}/eval/{name}", store_options=options)

    local = source(name, sorted((val_sets / name).iterdir()))
    n = local.samples_per_epoch
    assert n == SETS[name][1] * SETS[name][2]
    want = reference(local, n)
    assert reference(remote(), n) == want  # the same samples, local or on S3
    assert len(want) == n  # distinct samples: a duplicate would show
    check_exact(remote, 12)


def test_digests_of_one_pass_are_per_sample(val_sets: Path) -> None:
    """The check itself fails on a duplicate: a pass that read sample 0 twice is caught."""
    local = source("npy", sorted((val_sets / "npy").iterdir()))
    n = local.samples_per_epoch
    twice = local.read(0, np.array([0, *range(n - 1)], dtype=np.int64))
    got = Counter(reference(type("S", (), {"read": lambda self, s, x: twice})(), n))
    assert got != reference(local, n)


def test_token_tails_on_s3_predict_every_token_once(s3: S3Fixture, tmp_path: Path) -> None:
    """TokenSource(tail=True) over S3 token files (ranged GETs into buffered windows): on
    1-4 hosts, every token but each file's first is a target where ``loss_mask``, once."""
    L = 16
    # Tails of 7 and 1, none, short files; 2040: the tail's whole row (from token 2032)
    # would end in a second block of 2,048 tokens that the window, ending with the file,
    # has not got.
    sizes = (3000, 2 * 255 * L + 2, L + 1, 5, 2, 2040)
    client = s3.server.info.boto3_client()
    for f, t in enumerate(sizes):
        body = (f * 10_000 + np.arange(t)).astype(np.uint16).tobytes()
        client.put_object(Bucket=BUCKET, Key=f"eval/tail/f{f}.bin", Body=body)
    options = {**s3.options(), "retry": FAST_RETRY}
    urls = [f"s3://{BUCKET}/eval/tail/f{f}.bin" for f in range(len(sizes))]
    want = Counter(f * 10_000 + p for f, t in enumerate(sizes) for p in range(1, t))

    def make() -> TokenSource:
        return TokenSource(
            urls,
            context=L,
            dtype=np.uint16,
            shuffle=False,
            tail=True,
            pad_id=65_535,
            window_bytes=8192,
            block_bytes=4096,
            store_options=options,
        )

    with closing(make()) as src:  # the last tail first, its window not yet read
        last = src.read(0, np.array([src.samples_per_epoch - 1]))
        assert last["y"][0].tolist() == [50_000 + p for p in range(2033, 2040)] + [65_535] * 9
    for world in (1, 2, 3, 4):
        got: Counter[int] = Counter()
        for rank in range(world):
            with Loader(make(), batch_size=12, rank=rank, world_size=world, epochs=1) as lo:
                for b in lo:
                    ok = b["valid"][:, None] & b["loss_mask"]
                    got.update(b["y"][ok].tolist())
                    assert (b["y"][b["valid"][:, None] & ~b["loss_mask"]] == 65_535).all()
        assert got == want, world


def test_token_strides_on_s3_count_every_target_once(s3: S3Fixture) -> None:
    """TokenSource(stride=5) over S3 token files (buffered windows, ranged GETs): on 1-4
    hosts each target is counted once where ``loss_mask``, its context the tokens before
    it; a window holding just a file's slid-back tail, read first, is the file's last
    17 tokens."""
    L, stride = 16, 5
    # 4,096 uint16 tokens a window: 816 starts. 8,174: the tail slides back out of the
    # grid's window 2 (a window of its own); 3,000: a tail of 3; short files.
    sizes = ((2 * 816 - 1) * stride + L + 1 + 2, 3000, L + 1, 5, 2)
    client = s3.server.info.boto3_client()
    for f, t in enumerate(sizes):
        body = (f * 10_000 + np.arange(t)).astype(np.uint16).tobytes()
        client.put_object(Bucket=BUCKET, Key=f"eval/stride/f{f}.bin", Body=body)
    options = {**s3.options(), "retry": FAST_RETRY}
    urls = [f"s3://{BUCKET}/eval/stride/f{f}.bin" for f in range(len(sizes))]

    def make() -> TokenSource:
        return TokenSource(
            urls,
            context=L,
            dtype=np.uint16,
            shuffle=False,
            stride=stride,
            window_bytes=8192,
            block_bytes=4096,
            store_options=options,
        )

    with closing(make()) as src:
        assert src.layout.window_count[2] == 1  # file 0's third window: the tail alone
        tail = int(np.flatnonzero(src.layout.locate(0, np.arange(4000)).window == 2)[0])
        row = src.read(0, np.array([tail]))
        assert row["x"][0].tolist() == list(range(sizes[0] - 1 - L, sizes[0] - 1))
        assert row["loss_mask"][0].tolist() == [False] * (L - 2) + [True] * 2
    for world in (1, 2, 3, 4):
        got: Counter[int] = Counter()
        for rank in range(world):
            with Loader(make(), batch_size=12, rank=rank, world_size=world, epochs=1) as lo:
                for b in lo:
                    ok = b["loss_mask"] & b["valid"][:, None]
                    for x, y, m in zip(b["x"].tolist(), b["y"].tolist(), ok, strict=True):
                        for c in np.flatnonzero(m).tolist():
                            assert x[: c + 1] == list(range(y[c] - c - 1, y[c]))
                            got[y[c]] += 1
        assert got == Counter(f * 10_000 + p for f, t in enumerate(sizes) for p in range(1, t))
