"""A flat S3 prefix (COCO's ``train2017/``: every key in one folder) listed in ranges cut
by name (``headrace.io._object_listing.cut_points``), on moto: the same keys, sizes and
tags as one listing, whatever the page and the fan.

The page and the fan are made small, so a few hundred keys are cut, and cut again, at
names around the ones obstore lists out of order: a folder marker ``a/`` is listed as
``a``, after ``a-1`` and ``a.txt`` in the bucket's order, before them by name.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from s3util import FAST_RETRY, S3Fixture

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import PermissionDeniedError
from headrace.io import ObjectStore, _object_listing

pytestmark = pytest.mark.integration

BUCKET = "headrace-flat"
IDS = sorted(random.Random(0).sample(range(100_000), 240))
KEYS = [
    *(f"{i:05d}.jpg" for i in IDS),
    # Names about a marker, whose key sorts after them and whose listed name before.
    "00500-a.jpg",
    "00500.jpg",
    "00500!",
    "00500/",  # a marker of a folder with objects: not listed
    "00500/x.bin",
    "007-b",
    "007/",  # an empty folder's marker: listed as "007"
    "0079",
    "5-",
    "5.",
    "5/",  # a marker with bytes alone under its name: listed as "5"
    "zz-top",
    "zz/",
]


def _body(key: str) -> bytes:
    if key.endswith("/") and key != "5/":
        return b""
    return hashlib.sha256(key.encode()).digest()[: len(key) % 7 + 1]


@pytest.fixture(scope="module")
def bucket(s3: S3Fixture) -> Iterator[dict[str, object]]:
    s3.server.create_bucket(BUCKET)
    client = s3.server.info.boto3_client()
    for key in KEYS:
        for prefix in ("", "flat/"):
            client.put_object(Bucket=BUCKET, Key=prefix + key, Body=_body(key))
    yield s3.options()


def _list(options: dict[str, object], prefix: str = "") -> list[tuple[str, object]]:
    with ObjectStore(f"s3://{BUCKET}", **options) as store:  # type: ignore[arg-type]
        return [(k, tuple(i)) for k, i in store.list_info(prefix)]


@pytest.fixture(scope="module")
def whole(bucket: dict[str, object]) -> list[tuple[str, object]]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_object_listing, "PAGE", 10**6)
        return _list(bucket, "flat")


def test_one_listing_is_what_the_prefix_holds(whole: list[tuple[str, object]]) -> None:
    names = [k.removeprefix("flat/") for k, _ in whole]
    assert names == sorted(k.rstrip("/") for k in KEYS if k != "00500/")
    assert dict(whole)["flat/5"][0] == len(_body("5/"))  # the marker with bytes


@pytest.fixture
def cuts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names listings are cut at (``cut_points``' answers), as they are made."""
    made: list[str] = []
    real = _object_listing.cut_points

    def counted(*args: Any) -> list[str]:
        points = real(*args)
        made.extend(points)
        return points

    monkeypatch.setattr(_object_listing, "cut_points", counted)
    return made


@pytest.mark.parametrize(("page", "fan"), [(2, 2), (3, 4), (5, 32), (8, 3), (40, 32)])
def test_every_cut_of_a_flat_prefix_lists_the_same_keys(
    bucket: dict[str, object],
    whole: list[tuple[str, object]],
    monkeypatch: pytest.MonkeyPatch,
    cuts: list[str],
    page: int,
    fan: int,
) -> None:
    monkeypatch.setattr(_object_listing, "PAGE", page)
    monkeypatch.setattr(_object_listing, "FAN", fan)
    assert _list(bucket, "flat") == whole
    assert cuts, "the prefix was never cut"
    if page == 8:  # the bucket's root: no prefix before the names cut
        root = _list(bucket)
        assert [(k, i) for k, i in root if k.startswith("flat/")] == whole
        assert len(root) == 2 * len(whole)


def test_cut_points_at_the_names_obstore_lists_out_of_order(
    bucket: dict[str, object], whole: list[tuple[str, object]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cut at each name a marker is listed as, and just before its key: the range before
    # reads past its end into the marker where no other key sorts between (``007-b``,
    # then ``007/``), and the range after lists it before its start.
    monkeypatch.setattr(_object_listing, "PAGE", 4)
    names = ["flat/007", "flat/00500", "flat/5", "flat/zz", "flat/5-"]
    for name in [*names, "flat/007-b", "flat/5.", "flat/zz-top", "flat/00500!"]:
        monkeypatch.setattr(_object_listing, "cut_points", _only(name))
        assert _list(bucket, "flat") == whole, name


def _only(name: str) -> Callable[..., list[str]]:
    """A ``cut_points`` that cuts at ``name`` alone, where it lies inside the range."""

    def at(paths: object, base: str, after: str, stop: str | None, most: int) -> list[str]:
        return [name] if after < name and (stop is None or name + "\0" < stop) else []

    return at


def test_a_flat_prefix_is_listed_in_ranges_at_once(
    bucket: dict[str, object], whole: list[tuple[str, object]], proxy: LatencyProxy
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_object_listing, "PAGE", 10)
        mp.setattr(_object_listing, "FAN", 8)
        proxy.latency_ms = 50.0
        try:
            assert _list({**bucket, "endpoint": proxy.endpoint}, "flat") == whole
        finally:
            proxy.latency_ms = 0.0
    # moto answers each request with all its keys (1,000 a page), so the cuts' ranges
    # are each one request: the first page, then up to 8 at once.
    assert proxy.stats.max_in_flight > 2
    assert 2 < proxy.stats.requests <= 1 + 8 * 4


def test_a_failed_cut_range_is_retried_alone(
    bucket: dict[str, object],
    whole: list[tuple[str, object]],
    proxy: LatencyProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_object_listing, "PAGE", 10)
    monkeypatch.setattr(_object_listing, "FAN", 4)
    proxy.set_faults([FaultRule(status=503, match="start-after", limit=2)])
    options = {**bucket, "endpoint": proxy.endpoint, "retry": FAST_RETRY}
    with ObjectStore(f"s3://{BUCKET}", **options) as store:  # type: ignore[arg-type]
        assert [(k, tuple(i)) for k, i in store.list_info("flat")] == whole
        assert store.stats.retries == 2


def test_a_server_that_ignores_start_after_still_gives_a_flat_prefix(
    bucket: dict[str, object], whole: list[tuple[str, object]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_object_listing, "PAGE", 6)
    monkeypatch.setattr(_object_listing, "FAN", 4)
    plain = _object_listing.obs.list

    def from_the_first(store: object, prefix: object = None, **kw: object) -> object:
        kw.pop("offset", None)
        return plain(store, prefix, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(_object_listing.obs, "list", from_the_first)
    assert _list(bucket, "flat") == whole


def test_a_folder_the_first_page_ends_in_is_cut_by_name_not_walked(
    s3: S3Fixture, monkeypatch: pytest.MonkeyPatch, cuts: list[str]
) -> None:
    # COCO's layout: annotations/, a large train2017/ and val2017/. The first page ends in
    # train2017/, so the walk stops at the level that holds it: listing that folder's own
    # level would be one listing of it, a page after another.
    s3.server.create_bucket("headrace-coco")
    client = s3.server.info.boto3_client()
    keys = ["coco/annotations/a.json", "coco/annotations/b.json", "coco/val2017/1.jpg"]
    keys += [f"coco/train2017/{i:05d}.jpg" for i in IDS[:120]]
    for key in keys:
        client.put_object(Bucket="headrace-coco", Key=key, Body=key.encode())
    monkeypatch.setattr(_object_listing, "PAGE", 10)
    monkeypatch.setattr(_object_listing, "FAN", 8)
    levels: list[str] = []
    real = _object_listing._level

    def walked(store: object, folder: str) -> object:
        levels.append(folder)
        return real(store, folder)

    monkeypatch.setattr(_object_listing, "_level", walked)
    with ObjectStore("s3://headrace-coco", **s3.options()) as store:  # type: ignore[arg-type]
        assert store.list("coco") == sorted((k, len(k)) for k in keys)
    assert levels == ["coco"]
    assert cuts and all(c.startswith("coco/train2017/") for c in cuts)


def test_a_denied_cut_range_fails_the_listing_naming_it(
    bucket: dict[str, object], proxy: LatencyProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pages of 4: the first, then the range after it, cut at flat/3 into two after its
    # second page (its first holds the marker 00500/, listed before its start: no cut
    # there); the first of the two, after that page's last key, is denied.
    last = f"{IDS[3]:05d}.jpg"
    assert sorted(k for k in KEYS if k <= last)[-4:] == ["0079", "01730.jpg", "01840.jpg", last]
    monkeypatch.setattr(_object_listing, "PAGE", 4)
    monkeypatch.setattr(_object_listing, "cut_points", _only("flat/3"))
    proxy.set_faults([FaultRule(status=403, match=last, limit=1)])
    options = {**bucket, "endpoint": proxy.endpoint, "retry": FAST_RETRY}
    with (
        ObjectStore(f"s3://{BUCKET}", **options) as store,  # type: ignore[arg-type]
        pytest.raises(PermissionDeniedError, match=r"access denied") as caught,
    ):
        store.list_info("flat")
    said = str(caught.value)
    assert f"flat/{last} (the keys listed from there through 'flat/3')" in said, said
