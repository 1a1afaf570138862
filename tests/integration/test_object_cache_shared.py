"""One cache_dir shared by several processes at once (ranks and their workers on one
host), against a real S3 endpoint (moto): the batches stay the uncached run's."""

from __future__ import annotations

import multiprocessing as mp
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture, upload_token_file

from headrace.io import ObjectCache
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

TOKENS = 40_001  # uint32: 160 KB, 20 blocks of 8 KiB
TOKEN_KW: dict[str, Any] = {"context": 32, "window_bytes": 32 << 10, "block_bytes": 8 << 10}
KEY = "shared-cache/tok.bin"


@pytest.fixture(scope="module")
def token_file(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return upload_token_file(
        s3, tmp_path_factory.mktemp("shared-cache"), "shared-cache", TOKENS, 11
    )


def _digest(src: Any, seed: int) -> str:
    with Loader(src, batch_size=16, seed=seed, steps=80) as loader:  # a pass and a bit
        return batch_digest(loader)


def _rank(options: dict[str, Any], cache: str, cap: int | None, runs: int) -> list[str]:
    """One process: ``runs`` passes through the shared cache, a digest each."""
    import warnings

    from headrace.formats import TokenSource

    warnings.simplefilter("ignore", RuntimeWarning)  # a cleared entry mid-read may warn
    out = []
    for r in range(runs):
        src = TokenSource(
            f"s3://{BUCKET}/{KEY}",
            store_options=options,
            cache_dir=cache,
            cache_bytes=cap,
            **TOKEN_KW,
        )
        out.append(_digest(src, seed=r))
    return out


def _clear(cache: str, seconds: float) -> int:
    """``headrace cache DIR --clear``, again and again for ``seconds`` once the ranks
    have begun to fill the cache: entries removed."""
    c = ObjectCache(cache)
    start = time.monotonic()
    while c.summary()["entries"] == 0 and time.monotonic() - start < 30:
        time.sleep(0.005)
    cleared = 0
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        cleared += c.prune(0)[0]
        time.sleep(0.01)
    return cleared


@pytest.mark.parametrize("cap", [None, 8 * ((8 << 10) + ObjectCache.TRAILER_BYTES)])
def test_ranks_filling_and_clearing_one_cache_read_the_same_batches(
    s3: S3Fixture, token_file: Path, tmp_path: Path, cap: int | None
) -> None:
    from headrace.formats import TokenSource

    want = [_digest(TokenSource(token_file, **TOKEN_KW), seed=r) for r in range(3)]
    options = {**s3.options(), "retry": FAST_RETRY}
    cache = str(tmp_path / "cache")
    ranks = 4
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(ranks + 1, mp_context=ctx) as pool:
        readers = [pool.submit(_rank, options, cache, cap, 3) for _ in range(ranks)]
        clearer = pool.submit(_clear, cache, 1.5)
        got = [f.result() for f in readers]
        cleared = clearer.result()
    assert cleared > 0  # the clearing ran beside the reads
    assert got == [want] * ranks
    # Filled again after the clearing: each pass again through the cache alone.
    assert _rank(options, cache, cap, 3) == want
    c = ObjectCache(cache)
    if cap is not None:
        assert c.summary()["bytes"] <= cap
    assert c.summary()["temporaries"] == 0
