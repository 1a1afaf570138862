"""Many token shards on S3 open from one listing of their directory (moto behind the proxy).

The proxy counts the HTTP requests: N shards open with one LIST and a GET of each
sidecar that exists, not a GET of each shard's head and a probe of each sidecar; the
batches equal the local files' and the per-object open's. A LIST refused (403), or a
directory far larger than the shards, falls back to per-object requests; shards and
sidecars missing or deleted after the listing are named.
"""

from __future__ import annotations

import hashlib
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

import headrace.formats._token_listing as listing
from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import ConfigError, DataError, FormatError, ObjectNotFoundError
from headrace.formats import TokenSource, write_megatron_index, write_token_sidecar
from headrace.formats._object_files import ObjectFiles
from headrace.formats._tokens import refuse_npy_tokens
from headrace.pipeline import Loader
from headrace.testing import update_digest

pytestmark = pytest.mark.integration

KW: dict[str, Any] = {"context": 32, "window_bytes": 16 << 10, "block_bytes": 4096}
SHARDS = 24


def _layout(root: Path, n: int) -> tuple[list[str], int]:
    """``n`` uint16 shards under ``root``: raw with a ``.json`` sidecar, every third a
    Megatron pair, every fourth raw with neither (the dtype is passed); the keys and
    the number of sidecars."""
    keys: list[str] = []
    sidecars = 0
    for i in range(n):
        tokens = np.random.default_rng(i).integers(0, 60_000, 1000 + 37 * i).astype(np.uint16)
        path = root / f"s{i:03d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        tokens.tofile(path)
        keys.append(path.name)
        if i % 3 == 2:
            write_megatron_index(path.with_suffix(".idx"), np.uint16, np.array([tokens.size]))
            keys.append(path.with_suffix(".idx").name)
            sidecars += 1
        elif i % 4 != 3:
            write_token_sidecar(path, "uint16", tokens=tokens.size)
            keys.append(path.name + ".json")
            sidecars += 1
    return keys, sidecars


def _upload(s3: S3Fixture, root: Path, prefix: str, keys: list[str]) -> None:
    client = s3.server.info.boto3_client()
    for key in keys:
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{key}", Body=(root / key).read_bytes())


@pytest.fixture(scope="module")
def shards(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], int]:
    """(local folder, shard URLs, sidecars) of ``SHARDS`` shards under ``listing/many/``."""
    root = tmp_path_factory.mktemp("listing")
    keys, sidecars = _layout(root, SHARDS)
    _upload(s3, root, "listing/many", keys)
    urls = [f"s3://{BUCKET}/listing/many/{k}" for k in keys if k.endswith(".bin")]
    return root, urls, sidecars


def _source(s3: S3Fixture, files: list[str], endpoint: str | None = None) -> TokenSource:
    remote = files[0].startswith("s3://")
    store = options(s3, endpoint) if remote else None
    return TokenSource(files, dtype="uint16", store_options=store, **KW)


def _digest(src: TokenSource, steps: int = 12) -> str:
    h = hashlib.sha256()
    with Loader(src, batch_size=8, seed=5, steps=steps) as loader:
        for batch in loader:
            update_digest(h, batch)
    return h.hexdigest()


def _local(root: Path, urls: list[str]) -> list[str]:
    return [str(root / u.rsplit("/", 1)[1]) for u in urls]


def test_shards_open_with_one_listing_and_the_sidecars_that_exist(
    s3: S3Fixture, shards: tuple[Path, list[str], int], proxy: LatencyProxy
) -> None:
    root, urls, sidecars = shards
    src = _source(s3, urls, proxy.endpoint)
    # One LIST (a page holds 1,000 keys), then one GET of each sidecar or index there is:
    # per object it was a GET of each head and of each probe, found or not (3 a shard).
    assert proxy.stats.requests == 1 + sidecars
    stats = src.object_stats
    assert stats is not None
    assert (stats.requests, stats.failures) == (1 + sidecars, 0)
    listed = _digest(src)
    assert listed == _digest(_source(s3, _local(root, urls)))
    src.close()


def test_the_per_object_open_gives_the_same_files_and_batches(
    s3: S3Fixture,
    shards: tuple[Path, list[str], int],
    proxy: LatencyProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, urls, _ = shards
    listed = _source(s3, urls, proxy.endpoint)
    monkeypatch.setattr(listing, "LIST_MIN_SHARDS", len(urls) + 1)
    proxy.reset_stats()
    single = _source(s3, urls, proxy.endpoint)
    megatron = sum(f.format == "megatron" for f in single.files)
    # Each shard's head, its .idx probe, and (where there is no .idx) its .json probe.
    assert proxy.stats.requests == 3 * len(urls) - megatron
    assert [(f.path, f.num_tokens, f.format, f.etag) for f in single.files] == [
        (f.path, f.num_tokens, f.format, f.etag) for f in listed.files
    ]
    assert _digest(single) == _digest(listed)


def test_a_single_shard_is_not_listed(
    s3: S3Fixture, shards: tuple[Path, list[str], int], proxy: LatencyProxy
) -> None:
    _, urls, _ = shards
    proxy.set_faults([FaultRule(kind="status", status=500, match="list-type=2")])
    src = _source(s3, urls[:1], proxy.endpoint)
    assert proxy.stats.faults == 0
    assert proxy.stats.requests == 3  # its head, the .idx and .json probes: as before
    src.close()


def test_a_refused_listing_falls_back_to_per_object_requests(
    s3: S3Fixture, shards: tuple[Path, list[str], int], proxy: LatencyProxy
) -> None:
    root, urls, _ = shards
    proxy.set_faults([FaultRule(kind="status", status=403, match="list-type=2")])
    src = _source(s3, urls, proxy.endpoint)
    megatron = sum(f.format == "megatron" for f in src.files)
    assert proxy.stats.faults == 1
    assert proxy.stats.requests == 1 + 3 * len(urls) - megatron
    assert _digest(src) == _digest(_source(s3, _local(root, urls)))


def test_a_directory_far_larger_than_the_shards_is_not_listed_to_the_end(
    s3: S3Fixture,
    tmp_path: Path,
    proxy: LatencyProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys, _ = _layout(tmp_path, 4)
    _upload(s3, tmp_path, "listing/big", keys)
    client = s3.server.info.boto3_client()
    for i in range(30):
        client.put_object(Bucket=BUCKET, Key=f"listing/big/other/{i:03d}", Body=b"x")
    urls = [f"s3://{BUCKET}/listing/big/{k}" for k in keys if k.endswith(".bin")]
    # 4 shards may bring 12 keys; with 5 of slack, 17: the 30 others are too many.
    monkeypatch.setattr(listing, "LIST_SLACK", 5)
    files = ObjectFiles(options(s3, proxy.endpoint))
    try:
        assert files.listing_upto(f"s3://{BUCKET}/listing/big", 17) is None
        assert len(files.listing_upto(f"s3://{BUCKET}/listing/big", 100) or []) == 37
        proxy.reset_stats()
        opened = listing.list_shards(files, urls)
        assert proxy.stats.requests == 1
        head, size, _ = opened.head(urls[0], 128)
        assert head is not None  # a GET of its first bytes: not from a listing
        assert size == (tmp_path / keys[0]).stat().st_size
    finally:
        files.close()
    proxy.reset_stats()
    src = _source(s3, urls, proxy.endpoint)
    assert proxy.stats.requests == 1 + 3 * 4 - 1  # one Megatron shard has no .json probe
    assert _digest(src, 4) == _digest(_source(s3, _local(tmp_path, urls)), 4)


def test_a_shard_not_in_the_listing_is_named_without_a_request(
    s3: S3Fixture, shards: tuple[Path, list[str], int], proxy: LatencyProxy
) -> None:
    _, urls, _ = shards
    gone = f"s3://{BUCKET}/listing/many/nope.bin"
    with pytest.raises(ObjectNotFoundError, match=rf"{gone}: no such object.*listed under"):
        _source(s3, [*urls[:3], gone], proxy.endpoint)
    # The LIST and at most the three other shards' sidecars (read in parallel); a request
    # for nope.bin (or its sidecars) would make it more.
    assert proxy.stats.requests <= 1 + 3


def test_a_shard_deleted_after_the_listing_is_named_at_its_read(
    s3: S3Fixture, tmp_path: Path, proxy: LatencyProxy
) -> None:
    keys, _ = _layout(tmp_path, 3)
    _upload(s3, tmp_path, "listing/deleted", keys)
    urls = [f"s3://{BUCKET}/listing/deleted/{k}" for k in keys if k.endswith(".bin")]
    src = _source(s3, urls, proxy.endpoint)
    s3.server.info.boto3_client().delete_object(Bucket=BUCKET, Key="listing/deleted/s001.bin")
    with pytest.raises(ObjectNotFoundError, match=rf"{urls[1]}"):
        _digest(src, 40)


def test_a_sidecar_deleted_after_the_listing_is_named(
    s3: S3Fixture, tmp_path: Path, proxy: LatencyProxy
) -> None:
    keys, _ = _layout(tmp_path, 2)
    _upload(s3, tmp_path, "listing/side", keys)
    urls = [f"s3://{BUCKET}/listing/side/{k}" for k in keys if k.endswith(".bin")]
    files = ObjectFiles(options(s3, proxy.endpoint))
    try:
        opened = listing.list_shards(files, urls)
        s3.server.info.boto3_client().delete_object(Bucket=BUCKET, Key="listing/side/s000.bin.json")
        side = f"{urls[0]}.json"
        with pytest.raises(ObjectNotFoundError, match=rf"{side}: listed under .* but gone"):
            opened.read(side)
        assert opened.read(f"{urls[0][:-4]}.idx") is None  # not listed: no request
    finally:
        files.close()


def test_an_npy_shard_opened_from_a_listing_is_refused_at_its_first_read(
    s3: S3Fixture, tmp_path: Path, proxy: LatencyProxy
) -> None:
    keys, _ = _layout(tmp_path, 2)
    np.save(tmp_path / "arr.npy", np.arange(5000, dtype=np.uint16))
    (tmp_path / "arr.bin").write_bytes((tmp_path / "arr.npy").read_bytes())
    _upload(s3, tmp_path, "listing/npy", [*keys, "arr.bin"])
    urls = [f"s3://{BUCKET}/listing/npy/{k}" for k in [*keys, "arr.bin"] if k.endswith(".bin")]
    src = _source(s3, urls, proxy.endpoint)  # its first bytes were not read: no GET of it
    assert src.files[-1].check_head
    with pytest.raises(FormatError, match=rf"{urls[-1]}: an NPY file \(shape \(5000,\)"):
        _digest(src, 60)
    src.close()


def test_uint32_nanogpt_files_are_refused_opened_alone_or_from_a_listing(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # Two languages' train.bin in one bucket open from a listing, without a GET of their
    # first bytes: the check that they are not uint32 is made at the first read.
    keys = []
    for lang in ("de", "en"):
        (tmp_path / lang).mkdir()
        np.random.default_rng(len(lang)).integers(0, 128_256, 3000).astype(np.uint32).tofile(
            tmp_path / lang / "train.bin"
        )
        keys.append(f"{lang}/train.bin")
    _upload(s3, tmp_path, "listing/wide", keys)
    urls = [f"s3://{BUCKET}/listing/wide/{k}" for k in keys]
    wide = r"train\.bin: taken as nanoGPT's uint16 .* look like 32 uint32 tokens"
    with pytest.raises(DataError, match=wide):
        TokenSource(urls[0], context=32, store_options=options(s3))
    src = TokenSource(urls, context=32, store_options=options(s3))
    assert src.files[0].check_head
    with pytest.raises(DataError, match=wide):
        _digest(src, 4)
    src.close()


def test_a_megatron_prefix_or_index_url_is_told_to_pass_the_bin(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # Megatron's --data-path is the pair's prefix: "no such object" alone until 2026-12-03,
    # and the .idx's URL asked for a dtype (given one, the index was read as tokens).
    np.arange(3000, dtype=np.uint16).tofile(tmp_path / "corpus.bin")
    write_megatron_index(tmp_path / "corpus.idx", np.uint16, np.array([1000, 2000]))
    _upload(s3, tmp_path, "listing/mega", ["corpus.bin", "corpus.idx"])
    prefix = f"s3://{BUCKET}/listing/mega/corpus"
    with pytest.raises(ObjectNotFoundError) as exc:
        TokenSource(prefix, context=32, store_options=options(s3))
    assert str(exc.value).startswith(f"{prefix}: no such object")
    assert str(exc.value).endswith(
        f"; {prefix}.idx is there: a Megatron-LM data prefix (its --data-path) stands for "
        f"its .bin and .idx pair: pass the token file, {prefix + '.bin'!r}"
    )
    with pytest.raises(FormatError, match=r"corpus\.idx: a Megatron-LM index, not raw tokens"):
        TokenSource(prefix + ".idx", context=32, dtype="uint16", store_options=options(s3))
    src = TokenSource(prefix + ".bin", context=32, store_options=options(s3))
    assert src.files[0].format == "megatron"
    src.close()


def test_a_listed_shard_gives_no_bytes_before_its_first_bytes_pass(
    s3: S3Fixture, tmp_path: Path, proxy: LatencyProxy
) -> None:
    # A read of a later block, with the first bytes not read yet, GETs them alongside:
    # an NPY file fails every read (not only the one of its first block), a raw one
    # costs that one GET of 128 bytes, once.
    np.save(tmp_path / "arr.npy", np.arange(20_000, dtype=np.uint16))
    raw = np.arange(20_000, dtype=np.uint16).tobytes()
    client = s3.server.info.boto3_client()
    client.put_object(
        Bucket=BUCKET, Key="listing/first/arr.bin", Body=(tmp_path / "arr.npy").read_bytes()
    )
    client.put_object(Bucket=BUCKET, Key="listing/first/raw.bin", Body=raw)
    base = f"s3://{BUCKET}/listing/first"
    files = ObjectFiles(options(s3, proxy.endpoint))
    try:
        infos = dict(files.listing_upto(base, 10) or [])
        npy, good = (
            files.open(u, infos[u].size, infos[u].etag, partial(refuse_npy_tokens, u))
            for u in (f"{base}/arr.bin", f"{base}/raw.bin")
        )
        out = np.empty(4096, np.uint8)
        for offset in (8192, 0, 12288):
            with pytest.raises(FormatError, match=rf"{base}/arr\.bin: an NPY file"):
                npy.read_into(out, offset).result()
        proxy.reset_stats()
        for offset in (8192, 16384, 0):
            good.read_into(out, offset).result()
            assert bytes(out) == raw[offset : offset + 4096]
        assert proxy.stats.requests == 3 + 1
    finally:
        files.close()


def test_a_glob_or_prefix_reads_as_the_sorted_list_of_urls(
    s3: S3Fixture, shards: tuple[Path, list[str], int]
) -> None:
    root, urls, _ = shards
    want = _source(s3, urls)
    digest = _digest(want)
    assert digest == _digest(_source(s3, _local(root, urls)))
    base = f"s3://{BUCKET}/listing/many"
    # A glob that matches the sidecars and indexes too (s000.bin.json, s002.idx): left out.
    for given in (f"{base}/*.bin", f"{base}/", f"{base}/s*"):
        src = TokenSource(given, dtype="uint16", store_options=options(s3), **KW)
        assert [f.path for f in src.files] == urls, given
        assert src.fingerprint() == want.fingerprint()
        assert _digest(src) == digest
        src.close()
    with pytest.raises(ObjectNotFoundError, match=rf"{base}/\*\.tok: no objects match") as info:
        TokenSource(f"{base}/*.tok", dtype="uint16", store_options=options(s3), **KW)
    assert f"listed under {base}/" in str(info.value)
    # A prefix of several splits (nanoGPT's train.bin and val.bin) is refused, as a folder.
    client = s3.server.info.boto3_client()
    for name in ("train.bin", "val.bin"):
        body = np.arange(3000, dtype=np.uint16).tobytes()
        client.put_object(Bucket=BUCKET, Key=f"listing/splits/{name}", Body=body)
    splits = f"s3://{BUCKET}/listing/splits/"
    with pytest.raises(ConfigError, match=r"several splits .*'s3://.*/splits/\*train\*\.bin'"):
        TokenSource(splits, dtype="uint16", store_options=options(s3), **KW)
    one = TokenSource(splits + "*train*", dtype="uint16", store_options=options(s3), **KW)
    assert [f.path for f in one.files] == [splits + "train.bin"]
    one.close()
    # A prefix without its '/' is a key, as before: not found, with how to name a prefix.
    with pytest.raises(ObjectNotFoundError) as info:
        TokenSource(base, dtype="uint16", store_options=options(s3), **KW)
    assert "end it with '/'" in info.value.__notes__[0]
    # A misspelt prefix (nothing under it) names the one beside it (it said "no objects").
    with pytest.raises(ObjectNotFoundError) as info:
        TokenSource(base[:-1] + "/", dtype="uint16", store_options=options(s3), **KW)
    assert str(info.value).startswith(
        f"{base[:-1]}/: a prefix with no .bin token objects right under it (no objects; "
        f"did you mean {base + '/'!r}?)"
    )
    # An object's URL with a '/' added is said to be one (it suggested itself until
    # 2026-12-04: "did you mean '.../one/'?").
    client.put_object(Bucket=BUCKET, Key="listing/one", Body=np.arange(99, dtype="u2").tobytes())
    with pytest.raises(ObjectNotFoundError) as info:
        TokenSource(f"s3://{BUCKET}/listing/one/", dtype="uint16", store_options=options(s3), **KW)
    assert f"(no objects; 's3://{BUCKET}/listing/one' is an object: leave out the '/'" in str(
        info.value
    )
    want.close()
