"""llm.c / modded-nanogpt shards on S3 (moto behind the proxy) read as the local files.

Each shard's tokens follow a 1,024-byte header; every ranged GET of a block is shifted
past it. The batches, files and fingerprint equal the local copy's, whether the shards
are opened one by one or from a listing (a glob, a prefix, a list of URLs), a resumed
loader continues exactly, and a shard whose size is not its header's is refused naming
the URL and both sizes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.emulate import LatencyProxy
from headrace.errors import DataError, FormatError, StateError
from headrace.formats import TokenSource
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, update_digest

pytestmark = pytest.mark.integration

HEAD = 1024
KW: dict[str, Any] = {"context": 16, "window_bytes": 8 << 10, "block_bytes": 4096}
PREFIX = "llmc49"


def llmc_shard(path: Path, tokens: np.ndarray, magic: int = 20240520, version: int = 1) -> None:
    header = np.zeros(256, dtype=np.int32)
    header[:3] = magic, version, len(tokens)
    path.write_bytes(header.tobytes() + tokens.tobytes())


def _upload(s3: S3Fixture, root: Path, prefix: str) -> list[str]:
    client = s3.server.info.boto3_client()
    urls = []
    for path in sorted(root.iterdir()):
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{path.name}", Body=path.read_bytes())
        urls.append(f"s3://{BUCKET}/{prefix}/{path.name}")
    return urls


@pytest.fixture(scope="module")
def shards(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """(local folder, URLs) of three uint16 train shards (ids from 3 up: the header's
    words, 0s and a 1, are no token) under ``llmc49/train/``."""
    root = tmp_path_factory.mktemp("llmc")
    for i, n in enumerate((3001, 1777, 5120)):
        tokens = np.random.default_rng(i).integers(3, 50_000, n).astype(np.uint16)
        llmc_shard(root / f"fineweb_train_{i:06d}.bin", tokens)
    return root, _upload(s3, root, f"{PREFIX}/train")


def _digest(src: TokenSource, steps: int = 10) -> str:
    h = hashlib.sha256()
    with Loader(src, batch_size=8, seed=5, steps=steps) as loader:
        for batch in loader:
            assert batch["x"].min() >= 3  # no header byte read as a token
            update_digest(h, batch)
    return h.hexdigest()


def _one(batch: Any) -> str:
    h = hashlib.sha256()
    update_digest(h, batch)
    return h.hexdigest()


def _expected(src: TokenSource, root: Path, seed: int, samples: np.ndarray) -> np.ndarray:
    files, offsets = src.starts(seed, samples)
    rows = []
    for f, s in zip(files.tolist(), offsets.tolist(), strict=True):
        name = src.files[f].path.rsplit("/", 1)[1]
        tokens = np.fromfile(root / name, dtype=np.uint16, offset=HEAD)
        rows.append(tokens[s : s + src.context + 1])
    return np.stack(rows)


@pytest.mark.parametrize("dtype", [None, "uint16"])
def test_shards_on_s3_read_as_the_local_files(
    s3: S3Fixture, shards: tuple[Path, list[str]], proxy: LatencyProxy, dtype: str | None
) -> None:
    root, urls = shards
    store = options(s3, proxy.endpoint)
    local = TokenSource(sorted(root.iterdir()), dtype=dtype, **KW)
    want = _digest(local)
    fp = local.fingerprint()
    base = f"s3://{BUCKET}/{PREFIX}/train"
    for files in (urls, f"{base}/", f"{base}/fineweb_train_*.bin"):
        proxy.reset_stats()
        src = TokenSource(files, dtype=dtype, store_options=store, **KW)
        assert [f.format for f in src.files] == ["llmc"] * 3
        assert [f.num_tokens for f in src.files] == [3001, 1777, 5120]
        assert src.fingerprint() == fp
        # One LIST, then one GET of each shard's first bytes (their header) at most: no
        # probes of sidecars the listing lacks.
        assert proxy.stats.requests <= 1 + len(urls) + 1
        samples = np.arange(src.samples_per_epoch)
        got = src.read(5, samples)
        exp = _expected(src, root, 5, samples)
        assert np.array_equal(got["x"], exp[:, :-1]) and np.array_equal(got["y"], exp[:, 1:])
        assert _digest(src) == want
        src.close()
    # One shard alone: its head is a GET of its own.
    one = TokenSource(urls[1], dtype=dtype, store_options=store, shuffle=False, **KW)
    samples = np.arange(one.samples_per_epoch)
    assert np.array_equal(one.read(0, samples)["x"], _expected(one, root, 0, samples)[:, :-1])
    one.close()
    local.close()


def test_resume_and_states_across_local_and_s3(
    s3: S3Fixture, shards: tuple[Path, list[str]]
) -> None:
    root, urls = shards

    def make() -> Loader:
        return Loader(TokenSource(urls, store_options=options(s3), **KW), batch_size=6, epochs=1)

    with make() as lo:
        steps = lo.steps
        assert steps is not None
    assert_resume_exact(make, steps=steps, resume_at=[0, 5, steps - 1])
    # A state saved from the local copy loads into the S3 source (the same plan).
    with Loader(TokenSource(sorted(root.iterdir()), **KW), batch_size=6, epochs=1) as lo:
        it = iter(lo)
        for _ in range(4):
            next(it)
        state = lo.state_dict()
        rest = _one(next(it))
    with make() as lo:
        lo.load_state_dict(state)
        assert _one(next(iter(lo))) == rest
    # Not into one over the same tokens written raw (another file format).
    raw = root.parent / "raw49"
    raw.mkdir(exist_ok=True)
    for path in sorted(root.iterdir()):
        np.fromfile(path, np.uint16, offset=HEAD).tofile(raw / path.name)
    raw_urls = _upload(s3, raw, f"{PREFIX}/raw")
    other = TokenSource(raw_urls, dtype="uint16", store_options=options(s3), **KW)
    with Loader(other, batch_size=6, epochs=1) as lo, pytest.raises(StateError):
        lo.load_state_dict(state)


def test_a_validation_shard_on_s3_counts_every_token(s3: S3Fixture, tmp_path: Path) -> None:
    tokens = np.random.default_rng(9).integers(3, 100_000, 2003).astype(np.uint32)
    (tmp_path / "v").mkdir()
    llmc_shard(tmp_path / "v" / "fineweb_val_000000.bin", tokens, 20240801, 7)
    (url,) = _upload(s3, tmp_path / "v", f"{PREFIX}/val")
    src = TokenSource(url, store_options=options(s3), shuffle=False, tail=True, **KW)
    assert src.dtype == np.uint32
    batch = src.read(0, np.arange(src.samples_per_epoch))
    assert np.array_equal(batch["y"][batch["loss_mask"]], tokens[1:])
    src.close()


def test_shards_whose_size_is_not_their_headers_are_refused(s3: S3Fixture, tmp_path: Path) -> None:
    tokens = np.arange(3, 1003, dtype=np.uint16)
    (tmp_path / "bad").mkdir()
    llmc_shard(tmp_path / "bad" / "fineweb_train_000000.bin", tokens)
    llmc_shard(tmp_path / "bad" / "fineweb_train_000001.bin", tokens)
    cut = tmp_path / "bad" / "fineweb_train_000001.bin"
    cut.write_bytes(cut.read_bytes()[:-10])
    urls = _upload(s3, tmp_path / "bad", f"{PREFIX}/bad")
    for files in (urls, urls[1]):  # from a listing, and alone
        with pytest.raises(DataError) as info:
            TokenSource(files, store_options=options(s3), **KW)
        msg = str(info.value)
        assert urls[1] in msg and "truncated" in msg and "3024" in msg and "3014" in msg


def test_listed_renamed_shards_given_a_dtype_are_refused_at_their_first_read(
    s3: S3Fixture, tmp_path: Path, proxy: LatencyProxy
) -> None:
    (tmp_path / "r").mkdir()
    for name in ("a.bin", "b.bin"):
        llmc_shard(tmp_path / "r" / name, np.arange(3, 903, dtype=np.uint16))
    urls = _upload(s3, tmp_path / "r", f"{PREFIX}/renamed")
    store = options(s3, proxy.endpoint)
    src = TokenSource(urls, dtype="uint16", store_options=store, **KW)
    assert proxy.stats.requests == 1  # the LIST: a raw shard given a dtype costs nothing
    with pytest.raises(FormatError, match=r"[ab]\.bin: an llm\.c.*format='llmc'"):
        src.read(0, np.arange(4))
    src.close()
    fixed = TokenSource(urls, format="llmc", store_options=store, **KW)
    assert [f.num_tokens for f in fixed.files] == [900, 900]
    assert fixed.read(0, np.arange(4))["x"].min() >= 3
    fixed.close()
