"""Object names obstore cannot name (an empty path segment: ``d//x.bin``), on moto.

obstore's paths have no empty segment: a URL's prefix lost it without a word, so
``s3://bucket/d//x.bin`` read ``d/x.bin``, another object's bytes; and a listing
stopped at such a key with obstore's parse error. In a bucket of their own, beside
``d/x.bin``, the object such a read would have found instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from s3util import S3Fixture

from headrace.errors import ConfigError, StorageError
from headrace.formats import FileSource, TokenSource
from headrace.io import ObjectStore

pytestmark = pytest.mark.integration

BUCKET = "headrace-names"
DOUBLE = np.arange(100, dtype=np.uint16).tobytes()  # at d//x.bin, d//y.bin, /d/x.bin
SINGLE = np.arange(100, 200, dtype=np.uint16).tobytes()  # at d/x.bin: read instead, before


@pytest.fixture(scope="module")
def names(s3: S3Fixture) -> Iterator[dict[str, object]]:
    s3.server.create_bucket(BUCKET)
    client = s3.server.info.boto3_client()
    for key in ("d//x.bin", "d//y.bin", "/d/x.bin"):
        client.put_object(Bucket=BUCKET, Key=key, Body=DOUBLE)
    client.put_object(Bucket=BUCKET, Key="d/x.bin", Body=SINGLE)
    client.put_object(Bucket=BUCKET, Key="e/x.bin", Body=SINGLE)
    client.put_object(Bucket=BUCKET, Key="e/sub/z.bin", Body=SINGLE)
    for key, body in (("f/x.bin", SINGLE), ("f/x.bin/", DOUBLE)):
        client.put_object(Bucket=BUCKET, Key=key, Body=body)
    for key, body in (("g/m", SINGLE), ("g/m/", b""), ("g/m/a.bin", DOUBLE)):
        client.put_object(Bucket=BUCKET, Key=key, Body=body)
    client.put_object(Bucket=BUCKET, Key="h/../y.bin", Body=SINGLE)
    client.put_object(Bucket=BUCKET, Key="i/bell\a.bin", Body=SINGLE)
    yield s3.options()


@pytest.mark.parametrize("url", [f"s3://{BUCKET}/d//x.bin", f"s3://{BUCKET}//d/x.bin"])
def test_a_url_with_an_empty_segment_is_refused_not_read_as_another_object(
    names: dict[str, object], url: str
) -> None:
    # Before: FileSource and TokenSource read d/x.bin's bytes (SINGLE), as if asked for it.
    path = url.split("/", 3)[3]
    for make in (
        lambda: FileSource([url], format="raw", store_options=names),
        lambda: FileSource([url, f"s3://{BUCKET}/d/x.bin"], format="raw", store_options=names),
        lambda: TokenSource(url, dtype="uint16", context=8, store_options=names),
    ):
        with pytest.raises(ConfigError, match="empty path segment") as info:
            make()
        message = str(info.value)
        assert message.startswith(url) and repr(path) in message
        assert "would read 'd/x.bin' instead" in message


def test_a_key_with_an_empty_segment_is_refused_by_every_call(
    names: dict[str, object], tmp_path: Path
) -> None:
    # obstore drops a key's leading (or trailing) '/': "/x.bin" under d read d/x.bin.
    with pytest.raises(ConfigError, match=r"s3://headrace-names//d: '/d' has an empty path"):
        ObjectStore(f"s3://{BUCKET}//d", **names)  # type: ignore[arg-type]
    with ObjectStore(f"s3://{BUCKET}/d", **names) as store:  # type: ignore[arg-type]
        assert bytes(store.get("x.bin")) == SINGLE
        upload = tmp_path / "up.bin"
        upload.write_bytes(b"new")
        calls = [
            lambda: store.get("/x.bin"),
            lambda: store.get_range("/x.bin", 0, 4),
            lambda: store.get_ranges("/x.bin", [(0, 4)]),
            lambda: store.get_first("/x.bin", 4),
            lambda: store.get_many([("/x.bin", 0, 4)]),
            lambda: store.stat("x.bin/"),
            lambda: store.list("/x"),
            lambda: store.put_file("/x.bin", upload),
        ]
        for call in calls:
            with pytest.raises(
                ConfigError, match=r"s3://headrace-names/d/(/x|x\.bin/).*empty path"
            ):
                call()
        assert bytes(store.get("x.bin")) == SINGLE  # not overwritten by the refused put
    with ObjectStore(f"s3://{BUCKET}/e", **names) as store:  # type: ignore[arg-type]
        assert store.list("sub") == store.list("sub/") == [("sub/z.bin", len(SINGLE))]


def test_a_listing_that_meets_such_a_key_names_it_and_the_way_out(
    names: dict[str, object],
) -> None:
    # Before: ConfigError "Encountered object with invalid path", with no way out.
    for url in (f"s3://{BUCKET}/d", f"s3://{BUCKET}"):
        with ObjectStore(url, **names) as store:  # type: ignore[arg-type]
            with pytest.raises(StorageError, match=r"the listing holds 'd//x\.bin'") as info:
                store.list()
            assert not isinstance(info.value, ConfigError)
            assert "aws s3 mv" in str(info.value) and str(info.value).startswith(url)
        with pytest.raises(StorageError, match=r"the listing holds 'd//x\.bin'"):
            FileSource(url, format="raw", store_options=names)
    for url, said in (
        (f"s3://{BUCKET}/h", "'h/../y.bin', a name obstore cannot hold (a path segment '..')"),
        (f"s3://{BUCKET}/i", "'i/bell\\x07.bin', a name obstore cannot hold (a character"),
    ):
        with ObjectStore(url, **names) as store:  # type: ignore[arg-type]
            with pytest.raises(StorageError) as info:
                store.list()
            assert said in str(info.value), str(info.value)
    source = FileSource(f"s3://{BUCKET}/e", format="raw", store_options=names)
    assert [bytes(source.files.fetch(i)) for i in range(2)] == [SINGLE, SINGLE]


def test_two_objects_listed_under_one_name_are_refused_by_name(names: dict[str, object]) -> None:
    # obstore lists "f/x.bin/" (not empty: no folder marker) as "x.bin", beside the real
    # one. Before: both were listed as "x.bin", and the second read as the first.
    with ObjectStore(f"s3://{BUCKET}/f", **names) as store:  # type: ignore[arg-type]
        with pytest.raises(StorageError, match=r"two objects under the name 'x\.bin'") as info:
            store.list()
        assert "('/x.bin' or 'x.bin/')" in str(info.value)
        assert str(info.value).startswith(f"s3://{BUCKET}/f/:")
        with pytest.raises(StorageError, match=r"two objects under the name 'x\.bin'"):
            store.list_info_upto("", 100)
    with ObjectStore(f"s3://{BUCKET}/g", **names) as store:  # type: ignore[arg-type]
        # An empty "m/" beside an object "m" is a folder marker, as a console makes it.
        assert store.list() == [("m", len(SINGLE)), ("m/a.bin", len(DOUBLE))]


@pytest.mark.parametrize(
    ("url", "meant"),
    [("d/./x.bin", "d/x.bin"), ("e/sub/../x.bin", "e/x.bin"), ("./d/x.bin", "d/x.bin")],
)
def test_a_url_with_a_dot_segment_is_named_whole_with_the_url_meant(
    names: dict[str, object], url: str, meant: str
) -> None:
    # Before: "s3://.../d/.: cannot open store: Could not parse path: ..." (the store's
    # part of the URL, and no way out).
    full = f"s3://{BUCKET}/{url}"
    for make in (
        lambda: FileSource([full], format="raw", store_options=names),
        lambda: TokenSource(full, dtype="uint16", context=8, store_options=names),
    ):
        with pytest.raises(ConfigError, match=r"has a '\.\.?' path segment") as info:
            make()
        message = str(info.value)
        assert message.startswith(f"{full}: ")
        assert message.endswith(f"If you meant 's3://{BUCKET}/{meant}', write that")
    folder = full.rsplit("/", 1)[0]
    with pytest.raises(ConfigError, match=rf"^{re.escape(folder)}: has a '\.\.?' path segment"):
        ObjectStore(folder, **names)  # type: ignore[arg-type]
    src = TokenSource(f"s3://{BUCKET}/{meant}", dtype="uint16", context=8, store_options=names)
    assert src.files[0].num_tokens == 100
