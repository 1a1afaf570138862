"""ObjectStore and sources on az:// (Azurite), gs://, http:// and https:// (fake-gcs-server).

Each emulator is a real server on 127.0.0.1 that speaks its cloud's HTTP API,
started by the session (``azutil``, ``gcsutil``); every read must give the
bytes, or the batches, of the same objects written as local files. Fault
injection (5xx, cut bodies, retries) is tested on S3 and shares its code; one
cut body on Azure checks that the path is the same there.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3util import OBJECTS, SMALL, expected

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import (
    ObjectNotFoundError,
    PermissionDeniedError,
    ReadEOFError,
    StorageError,
    TransientStorageError,
)
from headrace.formats import TableSource, TokenSource, write_token_sidecar
from headrace.io import ObjectStore
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration


class Cloud(Protocol):
    """What ``azutil.AzuriteFixture`` and ``gcsutil.GCSFixture`` both offer."""

    local_dir: Path

    @property
    def endpoint(self) -> str: ...
    def url(self, container: str = ..., prefix: str = ...) -> str: ...
    def options(self, **extra: Any) -> dict[str, Any]: ...
    def put(self, key: str, data: bytes) -> None: ...


@pytest.fixture(params=["az", "gs"])
def cloud(request: pytest.FixtureRequest) -> Cloud:
    fixture: Cloud = request.getfixturevalue("azurite" if request.param == "az" else "fake_gcs")
    return fixture


@pytest.fixture
def store(cloud: Cloud) -> Any:
    with ObjectStore(cloud.url(), **cloud.options()) as s:
        yield s


def test_reads_give_the_local_bytes(cloud: Cloud, store: ObjectStore) -> None:
    big = expected("big.bin")
    assert store.url == cloud.url()
    assert bytes(store.get("big.bin")) == big
    assert bytes(store.get("empty.bin")) == b""
    assert bytes(store.get(SMALL[3])) == expected(SMALL[3])
    assert store.size("big.bin") == len(big)
    assert bytes(store.get_range("big.bin", 1_000_003, 65_537)) == big[1_000_003:1_065_540]
    assert bytes(store.get_range("big.bin", len(big) - 1, 1)) == big[-1:]
    ranges = [(3_000_000, 4096), (0, 100), (2_000_000, 1), (10, 0), (5000, 70_000)]
    got = store.get_ranges("big.bin", ranges)
    assert [bytes(g) for g in got] == [big[o : o + n] for o, n in ranges]
    data, info = store.get_first("big.bin", 1000)
    assert bytes(data) == big[:1000] and info == store.stat("big.bin")
    data, info = store.get_first(SMALL[5], 1 << 20)  # the whole object
    assert bytes(data) == expected(SMALL[5]) and info.size == OBJECTS[SMALL[5]]
    data, info = store.get_first("empty.bin", 8)
    assert bytes(data) == b"" and info.size == 0
    assert store.list() == sorted(OBJECTS.items())
    assert store.list("small/")[:2] == [(k, OBJECTS[k]) for k in SMALL[:2]]
    local = sorted(
        (p.relative_to(cloud.local_dir).as_posix(), p.stat().st_size)
        for p in cloud.local_dir.rglob("*")
        if p.is_file()
    )
    assert store.list() == local


def test_get_many_in_request_order(store: ObjectStore) -> None:
    big = expected("big.bin")
    requests: list[Any] = [*SMALL[::-1], ("big.bin", 2_500_000, 300_000), "empty.bin"]
    requests += [("big.bin", o, 4096) for o in range(0, 3_000_000, 250_000)]
    got = store.get_many(requests, max_in_flight=8)
    want = [expected(r) if isinstance(r, str) else big[r[1] : r[1] + r[2]] for r in requests]
    assert [bytes(g) for g in got] == want
    assert store.stats.max_in_flight_observed > 1


def test_a_listed_objects_etag_is_the_one_its_reads_see(store: ObjectStore) -> None:
    # Azure and GCS list ETags bare but send them quoted in headers: a listing's
    # ObjectInfo read with expect= was refused as "changed while open".
    listed = dict(store.list_info())
    for key in ("big.bin", SMALL[0]):
        assert listed[key] == store.stat(key) and listed[key].etag
        out = np.empty(1000, np.uint8)
        asyncio.run(store.aread_into(key, 7, out, expect=listed[key]))
        assert out.tobytes() == expected(key)[7:1007]


def test_missing_object_and_missing_container_name_the_url(
    cloud: Cloud, store: ObjectStore
) -> None:
    url = cloud.url()
    for read in (
        lambda: store.get("missing.bin"),
        lambda: store.stat("missing.bin"),
        lambda: store.get_first("missing.bin", 8),
        lambda: store.get_range("missing.bin", 0, 8),
        lambda: store.get_many(["missing.bin"]),
    ):
        with pytest.raises(ObjectNotFoundError, match=rf"^{url}/missing\.bin[^:]*: no such object"):
            read()
    with pytest.raises(ReadEOFError, match=r"big\.bin, bytes \[3145739, 3145749\): .*3145739"):
        store.get_range("big.bin", OBJECTS["big.bin"], 10)
    # Azure says which: ContainerNotFound. fake-gcs-server answers a bare 404.
    what = "container" if url.startswith("az://") else "object"
    bad = cloud.url("no-such-place")
    with ObjectStore(bad, **cloud.options()) as nowhere:
        with pytest.raises(ObjectNotFoundError, match=rf"^{bad}/big\.bin: no such {what}"):
            nowhere.get("big.bin")
        with pytest.raises(ObjectNotFoundError, match=rf"^{bad}/big\.bin: no such {what}"):
            nowhere.get_first("big.bin", 8)
        if what == "container":  # GCS lists an absent bucket as empty
            with pytest.raises(ObjectNotFoundError, match=rf"^{bad}/: no such container"):
                nowhere.list()


def _token_files(root: Path) -> Path:
    path = root / "raw" / "tok.bin"
    path.parent.mkdir(parents=True)
    np.random.default_rng(7).integers(0, 60_000, 60_001).astype(np.uint32).tofile(path)
    write_token_sidecar(path, "uint32", tokens=60_001)
    return path


def _digest(make: Any, world: int, steps: int) -> str:
    """The global batches' digest, each batch the union of ``world`` hosts' slices."""
    per_rank = []
    for rank in range(world):
        with Loader(make(), batch_size=16, seed=3, steps=steps, rank=rank, world_size=world) as ld:
            per_rank.append([{k: v.copy() for k, v in b.items()} for b in ld])
    h = hashlib.sha256()
    for t in range(steps):
        h.update(
            batch_digest([{k: np.concatenate([r[t][k] for r in per_rank]) for k in "xy"}]).encode()
        )
    return h.hexdigest()


def test_token_source_gives_the_local_batches(cloud: Cloud, tmp_path: Path) -> None:
    path = _token_files(tmp_path)
    for p in (path, path.with_name("tok.bin.json")):
        cloud.put(f"tokens/raw/{p.name}", p.read_bytes())
    kw: dict[str, Any] = {"context": 64, "window_bytes": 64 << 10, "block_bytes": 16 << 10}
    url = f"{cloud.url(prefix='tokens')}/raw/tok.bin"
    opts = cloud.options()
    local = TokenSource(path, **kw)
    steps = -(-local.samples_per_epoch * 5 // 4 // 16)  # 1.25 epochs: every window
    want = _digest(lambda: TokenSource(path, **kw), 1, steps)
    for world in (1, 2):
        assert _digest(lambda: TokenSource(url, store_options=opts, **kw), world, steps) == want
    remote = TokenSource(url, store_options=opts, **kw)
    assert remote.fingerprint() == local.fingerprint() and remote.files[0].etag
    remote.close()
    with pytest.raises(ObjectNotFoundError, match=rf"{url[:-7]}nope\.bin: no such object"):
        TokenSource(url[:-7] + "nope.bin", store_options=opts, dtype="uint16", **kw)
    # Two shards open from one listing: its sizes and ETags must be what reads see.
    second = tmp_path / "two.bin"
    second.write_bytes(path.read_bytes()[: 40_000 * 4])
    cloud.put("tokens/raw/two.bin", second.read_bytes())
    pair = TokenSource([url, url[:-7] + "two.bin"], store_options=opts, dtype="uint32", **kw)
    assert all(f.check_head for f in pair.files)  # from the listing
    assert [f.etag for f in pair.files[:1]] == [remote.files[0].etag]
    assert batch_digest(Loader(pair, batch_size=16, seed=3, steps=steps)) == batch_digest(
        Loader(
            TokenSource([path, second], dtype="uint32", **kw), batch_size=16, seed=3, steps=steps
        )
    )


def test_table_source_over_a_directory_gives_the_local_batches(
    cloud: Cloud, tmp_path: Path
) -> None:
    # A directory is listed; each file's listed size and ETag are then checked on every read.
    rng = np.random.default_rng(1)
    for i in range(2):
        lengths = rng.integers(1, 48, 600)
        table = pa.table(
            {
                "input_ids": pa.array(
                    [rng.integers(0, 50_000, n).astype(np.int32) for n in lengths],
                    pa.list_(pa.int32()),
                ),
                "label": np.arange(600, dtype=np.int64) + 600 * i,
            }
        )
        pq.write_table(table, tmp_path / f"train-{i}.parquet", row_group_size=200)
        cloud.put(f"tables/train-{i}.parquet", (tmp_path / f"train-{i}.parquet").read_bytes())
    kw: dict[str, Any] = {"columns": ["input_ids", "label"], "width": 48, "window_rows": 600}

    def digest(make: Any) -> str:
        return batch_digest(Loader(make(), batch_size=32, seed=2, steps=30))

    want = digest(lambda: TableSource(tmp_path, **kw))
    url = cloud.url(prefix="tables")
    assert digest(lambda: TableSource(url, store_options=cloud.options(), **kw)) == want


def test_http_store_reads_from_a_plain_http_server(fake_gcs: Any, tmp_path: Path) -> None:
    # fake-gcs-server also serves its objects as plain HTTP (GET with Range, HEAD, no
    # signature): what obstore's HTTP store needs, short of WebDAV for listing.
    url = f"{fake_gcs.endpoint}/headrace-test/data"
    big = expected("big.bin")
    with ObjectStore(url, allow_http=True, retry=fake_gcs.options()["retry"]) as store:
        assert store.url == url
        assert bytes(store.get("big.bin")) == big
        assert bytes(store.get_range("big.bin", 1000, 5000)) == big[1000:6000]
        assert store.stat("big.bin").size == len(big)
        data, info = store.get_first(SMALL[2], 1 << 20)
        assert bytes(data) == expected(SMALL[2]) and info == store.stat(SMALL[2])
        got = store.get_many([SMALL[1], ("big.bin", 5, 10), "empty.bin"])
        assert [bytes(g) for g in got] == [expected(SMALL[1]), big[5:15], b""]
        with pytest.raises(ObjectNotFoundError, match=rf"^{url}/missing\.bin: no such object"):
            store.get("missing.bin")
        with pytest.raises(ReadEOFError, match=r"object has 3145739 bytes"):
            store.get_range("big.bin", len(big), 10)
        with pytest.raises(StorageError, match=rf"^{url}/: HTTP 405 .*PROPFIND"):
            store.list()
    path = tmp_path / "train.bin"  # nanoGPT's layout: uint16 tokens, nothing beside
    np.random.default_rng(5).integers(0, 60_000, 90_001).astype(np.uint16).tofile(path)
    fake_gcs.put("http/train.bin", path.read_bytes())  # outside data/, which others list
    kw: dict[str, Any] = {"context": 64, "window_bytes": 64 << 10, "block_bytes": 16 << 10}

    def digest(source: Any) -> str:
        return batch_digest(Loader(source, batch_size=16, seed=9, steps=60))

    token_url = f"{fake_gcs.endpoint}/headrace-test/http/train.bin"
    remote = TokenSource(token_url, **kw)  # an http:// URL needs no allow_http
    assert remote.files[0].format == "nanogpt"
    assert digest(remote) == digest(TokenSource(path, **kw))
    # Two shards would be opened from a listing, which plain HTTP refuses (405): they
    # open one by one instead.
    other = tmp_path / "val.bin"
    np.random.default_rng(6).integers(0, 60_000, 40_001).astype(np.uint16).tofile(other)
    fake_gcs.put("http/val.bin", other.read_bytes())
    two = TokenSource([token_url, token_url[: -len("train.bin")] + "val.bin"], **kw)
    assert [f.format for f in two.files] == ["nanogpt", "nanogpt"]
    assert not any(f.check_head for f in two.files)  # their first bytes were read
    assert digest(two) == digest(TokenSource([path, other], **kw))


def test_https_with_a_self_signed_certificate(fake_gcs_tls: Any, tmp_path: Path) -> None:
    # The same objects over TLS: refused until the client is told to accept the
    # emulator's own certificate (client_options pass through to obstore's client).
    assert fake_gcs_tls.https_endpoint is not None
    url = f"{fake_gcs_tls.https_endpoint}/headrace-test/data"
    retry = fake_gcs_tls.options()["retry"]
    with ObjectStore(url, retry=retry) as store:
        with pytest.raises(
            StorageError,
            match=rf"^{url}/big\.bin: the server's TLS certificate is not trusted: "
            r"Other CaUsedAsEndEntity; .*'allow_invalid_certificates': True",
        ) as refused:
            store.get("big.bin")
        assert store.stats.retries == 0  # it would fail the same way again
        assert not isinstance(refused.value, TransientStorageError)
    trust = {"client_options": {"allow_invalid_certificates": True}, "retry": retry}
    big = expected("big.bin")
    with ObjectStore(url, **trust) as store:
        assert bytes(store.get("big.bin")) == big
        assert bytes(store.get_range("big.bin", 1000, 5000)) == big[1000:6000]
        assert store.stat("big.bin").size == len(big)
    path = tmp_path / "train.bin"
    np.random.default_rng(6).integers(0, 60_000, 90_001).astype(np.uint16).tofile(path)
    fake_gcs_tls.put("https/train.bin", path.read_bytes())
    kw: dict[str, Any] = {"context": 64, "window_bytes": 64 << 10, "block_bytes": 16 << 10}

    def digest(source: Any) -> str:
        return batch_digest(Loader(source, batch_size=16, seed=9, steps=60))

    remote = TokenSource(
        f"{fake_gcs_tls.https_endpoint}/headrace-test/https/train.bin", store_options=trust, **kw
    )
    assert digest(remote) == digest(TokenSource(path, **kw))


# -- Azure only ----------------------------------------------------------------------------


def test_use_emulator_with_an_endpoint_reaches_that_azurite(
    azurite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # obstore alone would dial 127.0.0.1:10000 whatever the endpoint says.
    with ObjectStore(azurite.url(), **azurite.emulator_options()) as store:
        assert bytes(store.get(SMALL[1])) == expected(SMALL[1])
    monkeypatch.setenv("AZURE_STORAGE_USE_EMULATOR", "true")
    opts = {k: v for k, v in azurite.emulator_options().items() if k != "config"}
    with ObjectStore(azurite.url(), **opts) as store:
        assert store.list("small/")[0] == (SMALL[0], OBJECTS[SMALL[0]])
    # azure:// (another of obstore's names for it), obstore's long key names, and an
    # endpoint with a trailing slash.
    config = {
        "azure_storage_use_emulator": "true",
        "azure_storage_endpoint": f"{azurite.endpoint}/devstoreaccount1/",
    }
    monkeypatch.delenv("AZURE_STORAGE_USE_EMULATOR")
    url = azurite.url().replace("az://", "azure://")
    with ObjectStore(url, config=config, retry=opts["retry"]) as store:
        assert store.url == url and store.size("big.bin") == OBJECTS["big.bin"]


def test_a_wrong_account_key_is_access_denied(azurite: Any) -> None:
    opts = azurite.options()
    opts["config"] = {**opts["config"], "account_key": "d3Jvbmcga2V5"}  # base64 of "wrong key"
    with ObjectStore(azurite.url(), **opts) as store:
        with pytest.raises(PermissionDeniedError, match=rf"^{azurite.url()}/big\.bin: access"):
            store.get("big.bin")


def test_a_cut_body_from_azure_is_retried(azurite: Any) -> None:
    with LatencyProxy(azurite.endpoint) as proxy:
        opts = azurite.options()
        opts["config"] = {**opts["config"], "endpoint": f"{proxy.endpoint}/devstoreaccount1"}
        proxy.set_faults([FaultRule(kind="truncate", limit=1)])
        with ObjectStore(azurite.url(), **opts) as store:
            assert bytes(store.get("big.bin")) == expected("big.bin")
            assert proxy.stats.faults == 1 and store.stats.retries == 1
            proxy.set_faults([FaultRule(kind="truncate")])
            with pytest.raises(TransientStorageError, match=r"big\.bin.*gave up after 4"):
                store.get("big.bin")
