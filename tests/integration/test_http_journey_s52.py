"""A user's datasets on plain HTTP servers: bytes as stored, or refused by name.

The server (in a thread, on 127.0.0.1) serves a folder as nginx does, ranges included;
where ``NAME.gz`` lies beside ``NAME`` it answers for ``NAME`` with the ``.gz``'s bytes
and ``Content-Encoding: gzip``, whatever the request asked, as nginx's
``gzip_static always`` does (and S3 or GCS for an object uploaded with
``Content-Encoding: gzip``): the body is not the file's bytes.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from httputil import serve

from headrace.errors import StorageError
from headrace.formats import FileSource, TableSource, TokenSource
from headrace.io import ObjectStore
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration


@pytest.fixture
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    with serve(tmp_path, **getattr(request, "param", {})) as url:
        yield url, tmp_path


def _gzip_beside(path: Path) -> None:
    path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes(), mtime=0))


_ENCODED = r"train\.bin.*: the server sent it encoded \(Content-Encoding: gzip\)"


def test_a_gzip_encoded_body_is_refused_not_read_as_the_files_bytes(
    served: tuple[str, Path],
) -> None:
    # Until 2026-12-07 the gzip stream was read as the file: a raw file's bytes, a token
    # file's tokens (0x8b1f, ...), without a word.
    url, root = served
    tokens = (np.arange(20_000) * 7919 % 50257).astype(np.uint16)
    tokens.tofile(root / "train.bin")
    _gzip_beside(root / "train.bin")
    with ObjectStore(url) as store:
        with pytest.raises(StorageError, match=_ENCODED):
            store.get("train.bin")
        with pytest.raises(StorageError, match=_ENCODED):
            store.get_range("train.bin", 0, 64)
        with pytest.raises(StorageError, match=_ENCODED):
            store.get_first("train.bin", 64)
    with pytest.raises(StorageError, match=_ENCODED):
        FileSource([f"{url}/train.bin"], format="raw").files.fetch(0)
    with pytest.raises(StorageError, match=_ENCODED):
        src = TokenSource(f"{url}/train.bin", dtype="uint16", context=64)
        with Loader(src, batch_size=4, seed=1, steps=2) as loader:
            list(loader)
    # Without the .gz the same URLs give the file's bytes.
    (root / "train.bin.gz").unlink()
    with ObjectStore(url) as store:
        assert bytes(store.get("train.bin")) == tokens.tobytes()
        assert bytes(store.get_range("train.bin", 6, 10)) == tokens.tobytes()[6:16]


@pytest.mark.parametrize("served", [{"etags": False}], indirect=True)
def test_a_file_replaced_mid_run_is_refused_by_its_last_modified_without_an_etag(
    served: tuple[str, Path],
) -> None:
    # A server that sends Last-Modified and no ETag: a token file replaced by one of the
    # same size mid-run was read on, its new bytes in the batches after, without a word,
    # until 2026-12-07 (its size alone was checked). Its Last-Modified is now its tag,
    # a weak one (W/"..."): never cached, as a weak ETag is not.
    url, root = served
    path = root / "train.bin"
    (np.arange(1_000_000) % 50_000).astype(np.uint16).tofile(path)
    with ObjectStore(url) as store:
        tag = store.stat("train.bin").etag
        assert tag is not None and tag.startswith('W/"'), tag
    src = TokenSource(f"{url}/train.bin", dtype="uint16", context=64, window_bytes=1 << 16)
    with Loader(src, batch_size=4, seed=3, steps=200) as loader:
        batches = iter(loader)
        next(batches)
        st = path.stat()
        path.with_suffix(".new").write_bytes(bytes(st.st_size))  # zeros, the same size
        path.with_suffix(".new").replace(path)
        os.utime(path, (st.st_atime + 10, st.st_mtime + 10))
        with pytest.raises(StorageError, match=r"train\.bin, bytes .*changed while open"):
            for _ in batches:
                pass


@pytest.mark.parametrize("served", [{"lengths": False}], indirect=True)
def test_a_server_that_sends_no_content_length_is_named_with_what_to_do(
    served: tuple[str, Path],
) -> None:
    # A generated or streamed answer (no Content-Length, the body ends with the
    # connection): obstore's "Generic HTTP error: Content-Length Header missing from
    # response" said neither what the server did nor the way out.
    url, root = served
    np.save(root / "x.npy", np.arange(10))
    told = r"x\.npy.*: the server answered without a Content-Length header.*a static file server"
    with ObjectStore(url) as store:
        for read in (lambda: store.stat("x.npy"), lambda: store.get("x.npy")):
            with pytest.raises(StorageError, match=told):
                read()
    with pytest.raises(StorageError, match=told):
        FileSource([f"{url}/x.npy"], format="npy")


def _sources(where: Any) -> dict[str, Any]:
    return {
        "parquet": TableSource([where(f"shard-{i}.parquet") for i in range(3)], width=8),
        "tokens": TokenSource(where("train.bin"), dtype="uint16", context=64),
        "npy": FileSource([where(f"x{i}.npy") for i in range(4)], format="npy"),
    }


def test_shards_tokens_and_npy_files_over_http_give_the_local_batches_on_2_workers(
    served: tuple[str, Path],
) -> None:
    # The lab's nginx directory as a user reads it: Parquet shards, a token file and NPY
    # files by URL, shuffled, on 2 worker processes, and resumed there mid-run from a
    # state_dict: the batches of the same files read locally.
    pytest.importorskip("torch")
    import pyarrow as pa
    import pyarrow.parquet as pq

    from headrace.torch import HeadraceDataLoader, TorchDataset

    url, root = served
    for i in range(3):
        ids = pa.array([[i * 1000 + j] * (j % 5 + 1) for j in range(200)])
        pq.write_table(pa.table({"ids": ids, "n": range(200)}), root / f"shard-{i}.parquet",
                       row_group_size=50)  # fmt: skip
    for i in range(4):
        np.save(root / f"x{i}.npy", np.arange(30, dtype=np.float32).reshape(10, 3) + 100 * i)
    (np.arange(20_000) * 7919 % 50257).astype(np.uint16).tofile(root / "train.bin")
    local = _sources(lambda name: str(root / name))
    remote = _sources(lambda name: f"{url}/{name}")

    def batches(dl: Any, n: int | None = None) -> list[dict[str, np.ndarray]]:
        it = iter(dl)
        got = [next(it) for _ in range(n)] if n else list(it)
        return [{k: v.numpy() for k, v in b.items()} for b in got]

    for name, src in remote.items():
        with Loader(local[name], batch_size=4, seed=5, steps=8) as loader:
            want = batch_digest(loader)
        ds = TorchDataset(src, batch_size=4, seed=5, steps=8)
        with HeadraceDataLoader(ds, num_workers=2) as dl:
            first = batches(dl, 3)
            state = dl.state_dict()
        ds = TorchDataset(src, batch_size=4, seed=5, steps=8)
        with HeadraceDataLoader(ds, num_workers=2) as dl:
            dl.load_state_dict(state)
            rest = batches(dl)
        assert batch_digest(first + rest) == want, name
        src.close()
        local[name].close()
