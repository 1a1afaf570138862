"""The object cache over http://: what an ETag promises decides what is kept; and a
server that ignores Range.

A plain HTTP server (in a thread, on 127.0.0.1) serves a folder's files with GET,
Range (unless told not to, as Python's http.server) and HEAD, and an ETag that is
strong, weak (``W/"..."``) or absent, built as nginx builds its tags: from the file's
modification time (whole seconds) and size.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
from httputil import serve

from headrace.errors import ConfigError, StorageError
from headrace.formats import FileSource, TableSource, TokenSource
from headrace.io import ObjectStore
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration


def _serve(
    root: Path, etag: str, ranges: bool = True, token: str = ""
) -> Iterator[tuple[str, list[str]]]:
    """``root`` served with an ETag ``"strong"``, ``"weak"`` or ``"none"`` (then no
    Last-Modified either), built as nginx builds its tags (whole seconds); its base URL
    and the requests it took."""
    requests: list[str] = []
    how: dict[str, Any] = {"etags": etag != "none", "weak": etag == "weak", "tag_seconds": True}
    how |= {"modified": etag != "none", "ranges": ranges, "token": token, "requests": requests}
    with serve(root, **how) as url:
        yield url, requests


@pytest.fixture(params=["strong", "weak", "none"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    root = tmp_path / "served"
    root.mkdir()
    for i in range(3):
        (root / f"f{i}.bin").write_bytes(bytes([i]) * 1000)
    for url, _ in _serve(root, request.param):
        yield request.param, url, root


def _replace_in_the_same_second(path: Path, data: bytes) -> None:
    """New bytes of the same size, the time kept: a server's weak tag from (mtime, size),
    such as nginx's, stays the same, as it may within a second."""
    st = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _read_all(src: Any) -> list[bytes]:
    return [bytes(src.files.fetch(i)) for i in range(len(src.files))]


def test_only_a_strong_etag_is_cached_and_a_weak_one_never_serves_old_bytes(
    served: tuple[str, str, Path], tmp_path: Path
) -> None:
    # A weak ETag promises equivalent content, not the same bytes: entries keyed by one
    # served the old bytes of an object replaced in the same second.
    etag, url, root = served
    urls = [f"{url}/f{i}.bin" for i in range(3)]
    cache = tmp_path / "cache"
    cold = FileSource(urls, format="raw", cache_dir=cache)
    assert _read_all(cold) == [bytes([i]) * 1000 for i in range(3)]
    stats = cold.cache_stats
    assert stats is not None
    strong = etag == "strong"
    assert (stats.written, stats.uncacheable) == ((3, 0) if strong else (0, 3))
    if strong:
        warm = FileSource(urls, format="raw", cache_dir=cache)
        assert _read_all(warm) == _read_all(cold)
        assert warm.cache_stats is not None and warm.cache_stats.hits == 3
        return
    _replace_in_the_same_second(root / "f1.bin", b"\xff" * 1000)
    warm = FileSource(urls, format="raw", cache_dir=cache)
    assert _read_all(warm)[1] == b"\xff" * 1000
    assert not [p for p in cache.rglob("*") if p.is_file() and p.name != ".headrace-bytes"]


def test_token_ranges_are_cached_on_a_strong_etag_only(
    served: tuple[str, str, Path], tmp_path: Path
) -> None:
    etag, url, root = served
    tokens = np.random.default_rng(3).integers(0, 60_000, 20_001).astype(np.uint16)
    tokens.tofile(root / "train.bin")
    kw: dict[str, Any] = {
        "dtype": "uint16",
        "context": 32,
        "window_bytes": 16 << 10,
        "block_bytes": 4 << 10,
    }

    def digest(src: Any) -> str:
        return batch_digest(Loader(src, batch_size=8, seed=4, steps=20))

    want = digest(TokenSource(root / "train.bin", **kw))
    src = TokenSource(f"{url}/train.bin", cache_dir=tmp_path / "cache", **kw)
    assert digest(src) == want
    stats = src.cache_stats
    assert stats is not None
    if etag == "strong":
        assert stats.written > 0 and stats.uncacheable == 0
    else:
        assert stats.written == 0 and stats.uncacheable > 0


def test_a_server_that_ignores_range_is_named_with_what_works(tmp_path: Path) -> None:
    # Python's http.server answers a Range request with the whole file: the error was
    # obstore's "NotSupportedError: Operation not supported: Range request not supported".
    for i in range(2):
        np.save(tmp_path / f"{i}.npy", np.full((3, 2), i, np.int32))
    for url, _ in _serve(tmp_path, "strong", ranges=False):
        urls = [f"{url}/{i}.npy" for i in range(2)]
        whole = FileSource(urls, format="npy", samples_per_file=3)
        assert sorted(whole.read(0, np.arange(6))["data"][:, 0].tolist()) == [0, 0, 0, 1, 1, 1]
        whole.close()
        with pytest.raises(
            StorageError,
            match=r"/0\.npy, bytes \[0, 128\): the server does not serve byte ranges .*"
            r"samples_per_file given as counts",
        ):
            FileSource(urls, format="npy", samples_per_file="header")


def test_percent_encoded_urls_name_their_files_and_a_query_string_is_refused(
    tmp_path: Path,
) -> None:
    # "a%20b.npy", as browsers and urllib.parse.quote write it, was asked for as
    # "a%2520b.npy" (obstore encodes a key once more): a 404 for a file that is there.
    (tmp_path / "my set").mkdir()
    for i, name in enumerate(["a b.npy", "c+d.npy", "é.npy"]):
        np.save(tmp_path / "my set" / name, np.full(3, i, np.int32))
    local = FileSource(tmp_path / "my set", format="npy")
    for url, requests in _serve(tmp_path, "strong"):
        urls = [f"{url}/{quote(f'my set/{n}')}" for n in ["a b.npy", "c+d.npy", "é.npy"]]
        src = FileSource(urls, format="npy")
        assert src.files.keys == local.files.keys == ["a b.npy", "c+d.npy", "é.npy"]
        assert src.fingerprint() == local.fingerprint()
        assert (
            src.read(0, np.arange(3))["data"].tolist()
            == local.read(0, np.arange(3))["data"].tolist()
        )
        # A worker's copy opens the listing it is sent under the URLs' root, as for
        # file:// and s3:// lists (until 2026-12-04 it was sent every URL, and named,
        # split and sorted them again): the same names, fingerprint and bytes, and no
        # HEAD (sizes and ETags travel with the listing).
        want = src.read(0, np.arange(3))["data"].tolist()
        blob = pickle.dumps(src)
        assert blob.count(b"c+d.npy") == 1 and b"c%2Bd" not in blob  # no URL
        before = len(requests)
        for copy in (pickle.loads(blob), pickle.loads(pickle.dumps(pickle.loads(blob)))):
            assert copy._args[0] == src.files.url
            assert copy.files.keys == src.files.keys
            assert copy.fingerprint() == src.fingerprint()
            assert copy.read(0, np.arange(3))["data"].tolist() == want
            copy.close()
        made = requests[before:]  # each copy's three GETs, no HEAD
        assert len(made) == 6 and all(r.startswith("GET ") for r in made), made
        src.close()
        with pytest.raises(ConfigError, match=r"a\.npy\?sig=x: an http\(s\) URL with a query"):
            FileSource([f"{url}/a.npy?sig=x"], format="npy")


def test_a_url_that_redirects_is_followed_at_each_request(tmp_path: Path) -> None:
    # A Hugging Face Hub "resolve" URL answers 302 with a signed CDN URL: each HEAD and
    # ranged GET follows it (a signed URL expires, so none is kept), and the files,
    # their sizes, ETags and bytes are the CDN's: the local files' batches. A private
    # repository's token goes in obstore's client options, sent with every request;
    # without it the 401 is refused naming the URL.
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"ids": pa.array([[i] * (i % 7 + 1) for i in range(300)]), "n": range(300)})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=64)
    for i in range(4):
        np.save(tmp_path / f"{i}.npy", np.full(5, i, np.int16))
    local_table = TableSource(str(tmp_path / "t.parquet"), width=8)
    local_files = FileSource([str(tmp_path / f"{i}.npy") for i in range(4)], format="npy")
    token = {"client_options": {"default_headers": {"Authorization": "Bearer hf_test"}}}
    for url, requests in _serve(tmp_path, "strong", token="hf_test"):
        told = r"access denied; a server that asks for a token is sent one with store_options="
        with pytest.raises(StorageError, match=rf"{url}/resolve/t\.parquet: {told}.*401"):
            TableSource(f"{url}/resolve/t.parquet", width=8)
        remote_table = TableSource(f"{url}/resolve/t.parquet", width=8, store_options=token)
        remote_files = FileSource(
            [f"{url}/resolve/{i}.npy" for i in range(4)], format="npy", store_options=token
        )
        for local, remote in ((local_table, remote_table), (local_files, remote_files)):
            with Loader(local, batch_size=8, seed=1, steps=6) as a:
                want = batch_digest(a)
            with Loader(remote, batch_size=8, seed=1, steps=6) as b:
                assert batch_digest(b) == want
            remote.close()
        redirected = [r for r in requests if r.split()[1].startswith("/resolve/")]
        assert redirected and all(f"{r.split()[1][8:]}?sig=x" in " ".join(requests)
                                  for r in redirected)  # fmt: skip
        assert any(r.startswith("GET /t.parquet?sig=x") for r in requests)
    local_table.close()
    local_files.close()


@pytest.mark.parametrize("slash", ["", "/"])
def test_a_prefix_given_with_a_trailing_slash_asks_for_the_same_paths(
    tmp_path: Path, slash: str
) -> None:
    # http://host/pre/ asked for /pre//f0.bin until 2026-12-07 (a strict server: 404,
    # or another file), where http://host/pre asked for /pre/f0.bin.
    (tmp_path / "pre").mkdir()
    (tmp_path / "pre" / "f0.bin").write_bytes(b"abc" * 100)
    for url, requests in _serve(tmp_path, "strong"):
        with ObjectStore(f"{url}/pre{slash}") as store:
            assert bytes(store.get("f0.bin")) == b"abc" * 100
            assert bytes(store.get_ranges("f0.bin", [(3, 3)])[0]) == b"abc"
        got = [r for r in requests if "f0.bin" in r]
        assert got and all(r.endswith(" /pre/f0.bin") for r in got), got
