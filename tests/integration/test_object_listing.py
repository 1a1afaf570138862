"""A large S3 or GCS prefix listed as many ranges of keys at once
(``headrace.io._object_listing``), on moto and fake-gcs-server: the same keys, sizes and
tags as one listing, whatever the cut.

A fan starts past a first page of 1,000 keys; here the module's page, fan and depth
are made small, so a bucket of a few dozen keys is cut into ranges at every place a
real one would be: between folders whose names sort around ``/`` (``a-c/`` and
``a b/`` before ``a/``), with a level's own objects sorting inside a range, folder
markers, an empty folder, names S3 and obstore treat specially, and folders three
levels down.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from s3util import FAST_RETRY, S3Fixture

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import PermissionDeniedError, StorageError
from headrace.io import ObjectStore, _object_listing

pytestmark = pytest.mark.integration

BUCKET = "headrace-fan"
KEYS = [
    "top.bin",
    "a/x.bin",
    "a/y/z.bin",
    "a-c/x.bin",
    "a b/x.bin",
    "a#2/x.bin",
    "a%3/x.bin",
    "a[1]/x.bin",
    "a~/x.bin",
    "é/x.bin",
    "m/",  # a folder marker beside its folder's objects
    "m/1.bin",
    "m/2.bin",
    "m/a.bin",
    "m/n/1.bin",
    "m0.bin",
    "mm/1.bin",
    "empty/",  # an empty folder's marker: kept, as one listing keeps it
    "0/",  # ... and the first folder, whose marker no range before it lists
    *(f"train/c{c:02d}/{i}.jpg" for c in range(12) for i in range(3)),
    "train/README",  # a level's object sorting between its folders
    "train/c05.txt",  # ... and right after one of them
    "train/deep/er/still/1.bin",
    "val/1.jpg",
    "val/2.jpg",
]


def _body(key: str) -> bytes:
    return b"" if key.endswith("/") else hashlib.sha256(key.encode()).digest()[: len(key) % 9 + 1]


@pytest.fixture(scope="module")
def bucket(s3: S3Fixture) -> Iterator[dict[str, object]]:
    s3.server.create_bucket(BUCKET)
    client = s3.server.info.boto3_client()
    for key in KEYS:
        client.put_object(Bucket=BUCKET, Key=key, Body=_body(key))
    yield s3.options()


def _cut(monkeypatch: pytest.MonkeyPatch, page: int, fan: int, depth: int) -> None:
    monkeypatch.setattr(_object_listing, "PAGE", page)
    monkeypatch.setattr(_object_listing, "FAN", fan)
    monkeypatch.setattr(_object_listing, "DEPTH", depth)


def _list(options: dict[str, object], prefix: str = "", **kw: object) -> list[tuple[str, object]]:
    with ObjectStore(f"s3://{BUCKET}", **{**options, **kw}) as store:  # type: ignore[arg-type]
        return [(k, tuple(i)) for k, i in store.list_info(prefix)]


@pytest.fixture(scope="module")
def whole(bucket: dict[str, object]) -> list[tuple[str, object]]:
    """The listing in one piece: a first page that holds every key."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_object_listing, "PAGE", 10**6)
        return _list(bucket)


def test_one_listing_is_what_the_bucket_holds(whole: list[tuple[str, object]]) -> None:
    keys = [k for k, _ in whole]
    # Markers go where their folder has objects ("m/"), stay where it has none ("empty/",
    # listed by obstore without its slash).
    assert keys == sorted({k.rstrip("/") for k in KEYS} - {"m"})
    assert dict(whole)["a/x.bin"] == (len(_body("a/x.bin")), dict(whole)["a/x.bin"][1])


@pytest.mark.parametrize(
    ("page", "fan", "depth"),
    [(1, 2, 1), (1, 3, 2), (2, 4, 3), (5, 32, 3), (1, 1, 1), (3, 7, 1), (1, 40, 3), (1, 64, 1)],
)
def test_every_cut_lists_the_same_keys_sizes_and_tags(
    bucket: dict[str, object],
    whole: list[tuple[str, object]],
    monkeypatch: pytest.MonkeyPatch,
    page: int,
    fan: int,
    depth: int,
) -> None:
    _cut(monkeypatch, page, fan, depth)
    assert _list(bucket) == whole
    assert _list(bucket, "train/") == [(k, i) for k, i in whole if k.startswith("train/")]
    assert _list(bucket, "m") == [(k, i) for k, i in whole if k.startswith("m/")]


def test_a_server_that_ignores_start_after_still_gives_the_same_listing(
    bucket: dict[str, object], whole: list[tuple[str, object]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each range then lists from the prefix's first key: slower, the same keys.
    _cut(monkeypatch, 1, 4, 3)
    plain = _object_listing.obs.list

    def from_the_first(store: Any, prefix: Any = None, *, offset: Any = None, **kw: Any) -> Any:
        return plain(store, prefix, **kw)

    monkeypatch.setattr(_object_listing.obs, "list", from_the_first)
    assert _list(bucket) == whole


@pytest.fixture
def fanned(
    bucket: dict[str, object], proxy: LatencyProxy, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], ObjectStore]:
    """Opens a store of the bucket through the proxy, its listings cut into 4 ranges."""
    _cut(monkeypatch, 1, 4, 3)
    options = {**bucket, "endpoint": proxy.endpoint, "retry": FAST_RETRY}
    return lambda: ObjectStore(f"s3://{BUCKET}", **options)  # type: ignore[arg-type]


def _listed(store: ObjectStore) -> list[tuple[str, object]]:
    return [(k, tuple(i)) for k, i in store.list_info()]


def test_the_ranges_are_listed_at_once(
    fanned: Callable[[], ObjectStore], whole: list[tuple[str, object]], proxy: LatencyProxy
) -> None:
    # 300 ms: at 100, one range of 4 once ended before the last began, under load in CI.
    proxy.latency_ms = 300.0
    try:
        with fanned() as store:
            assert _listed(store) == whole
    finally:
        proxy.latency_ms = 0.0
    # The first page, the root's level (14 folders: past a fan of 4), then 4 ranges.
    assert proxy.stats.requests == 1 + 1 + 4
    assert proxy.stats.max_in_flight == 4


def test_a_failed_range_is_retried_alone(
    fanned: Callable[[], ObjectStore], whole: list[tuple[str, object]], proxy: LatencyProxy
) -> None:
    proxy.set_faults([FaultRule(status=503, match="start-after", limit=2)])
    with fanned() as store:
        assert _listed(store) == whole
        assert store.stats.retries == 2
    assert proxy.stats.requests == 1 + 1 + 4 + 2


@pytest.mark.parametrize("match", ["start-after", "delimiter"])
def test_a_denied_range_or_level_fails_the_listing_naming_it(
    fanned: Callable[[], ObjectStore], proxy: LatencyProxy, match: str
) -> None:
    proxy.set_faults([FaultRule(status=403, match=match, limit=1)])
    with (
        fanned() as store,
        pytest.raises(PermissionDeniedError, match=rf"s3://{BUCKET}/.*: access denied") as caught,
    ):
        store.list_info()
    # A range names where it starts (and ends); the others ran to their end or were
    # cancelled, none left behind: the store lists again at once.
    assert ("(the keys listed from there " in str(caught.value)) == (match == "start-after")
    with fanned() as store:
        assert len(store.list_info()) == len(KEYS) - 1


NAMES_BUCKET = "headrace-fan-names"


@pytest.fixture(scope="module")
def names(s3: S3Fixture) -> Iterator[dict[str, object]]:
    s3.server.create_bucket(NAMES_BUCKET)
    client = s3.server.info.boto3_client()
    for key, body in (
        *((f"p{i}/x.bin", b"x") for i in range(6)),
        ("f/x.bin", b"one"),
        ("f/x.bin/", b"other"),  # listed by obstore as f/x.bin too
        ("f/a/1.bin", b"x"),
        ("f/z/1.bin", b"x"),
        ("g/a/1.bin", b"x"),
        ("g/x.bin/", b"bytes"),  # a marker with bytes, alone under its name: listed once
        ("g/z/1.bin", b"x"),
        ("q/bad//x.bin", b"x"),  # an empty segment: no listing passes it
    ):
        client.put_object(Bucket=NAMES_BUCKET, Key=key, Body=body)
    yield s3.options()


@pytest.mark.parametrize(("fan", "depth"), [(1, 1), (3, 1), (3, 2), (2, 1)])
def test_two_objects_under_one_name_are_refused_when_fanned(
    names: dict[str, object], monkeypatch: pytest.MonkeyPatch, fan: int, depth: int
) -> None:
    _cut(monkeypatch, 1, fan, depth)
    with (
        ObjectStore(f"s3://{NAMES_BUCKET}/f", **names) as store,  # type: ignore[arg-type]
        pytest.raises(StorageError, match=r"two objects under the name 'x\.bin'"),
    ):
        store.list_info()


@pytest.mark.parametrize(("fan", "depth"), [(1, 1), (3, 1), (3, 2), (2, 1)])
def test_a_marker_with_bytes_alone_under_its_name_is_listed_once_when_fanned(
    names: dict[str, object], monkeypatch: pytest.MonkeyPatch, fan: int, depth: int
) -> None:
    _cut(monkeypatch, 1, fan, depth)
    with ObjectStore(f"s3://{NAMES_BUCKET}/g", **names) as store:  # type: ignore[arg-type]
        assert store.list() == [("a/1.bin", 1), ("x.bin", 5), ("z/1.bin", 1)]


def test_a_key_obstore_cannot_name_is_named_when_fanned(
    names: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    _cut(monkeypatch, 1, 3, 2)
    with (
        ObjectStore(f"s3://{NAMES_BUCKET}", **names) as store,  # type: ignore[arg-type]
        pytest.raises(StorageError, match=r"'q/bad//x\.bin'.*empty path segment"),
    ):
        store.list_info()


@pytest.mark.parametrize(
    ("url", "fans"),
    [
        ("s3://data/train", True),
        ("s3://data", True),
        ("s3://my-data--usw2-az1--x-s3/train", False),  # a directory bucket: out of order
        ("gs://data/train", True),
        ("az://data/train", False),
        ("file:///data/train", False),
    ],
)
def test_which_stores_list_in_ranges(url: str, fans: bool) -> None:
    assert _object_listing.fans_out(url) is fans


def test_a_gcs_prefix_in_ranges_lists_the_same_keys(
    fake_gcs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fake-gcs-server answers start-after with every key from the first: each range drops
    # the ones before it (a real GCS starts after it, as S3 does).
    fake_gcs.create_bucket(BUCKET)
    for key in KEYS:
        fake_gcs.put(key, _body(key), bucket=BUCKET)
    options = fake_gcs.options()

    def listed() -> list[tuple[str, tuple[int, str | None]]]:
        with ObjectStore(f"gs://{BUCKET}", **options) as store:
            return [(k, (i.size, i.etag)) for k, i in store.list_info()]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_object_listing, "PAGE", 10**6)
        whole = listed()
    assert [k for k, _ in whole] == sorted({k.rstrip("/") for k in KEYS} - {"m"})
    ranges = []
    real_range = _object_listing._Fan._range

    def counted(fan: Any, r: Any) -> Any:
        if r.low is not None:  # a run of folders (not a range cut from one)
            ranges.append(r.after)  # where it starts
        return real_range(fan, r)

    monkeypatch.setattr(_object_listing._Fan, "_range", counted)
    for page, fan, depth in [(1, 4, 3), (1, 64, 1), (2, 3, 2)]:
        _cut(monkeypatch, page, fan, depth)
        ranges.clear()
        assert listed() == whole, (page, fan, depth)
        assert len(ranges) == min(fan, 14), ranges  # in ranges: 14 folders at the root
