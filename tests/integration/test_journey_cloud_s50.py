"""A user's journey with data on Google Cloud Storage (fake-gcs-server) and Azure Blob
(Azurite), not S3: JPEG and NPY folders labelled by folders, globs, token shards,
Parquet, the cache, long listings, folder markers, odd names, objects deleted after
listing, wrong credentials and wrong scheme spellings; every value is compared with
the local copy of the same bytes."""

from __future__ import annotations

import concurrent.futures as cf
import io
from pathlib import Path
from typing import Any

import numpy as np
import obstore
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from headrace.errors import ConfigError, HeadraceError, ObjectNotFoundError, PermissionDeniedError
from headrace.formats import FileSource, TableSource, TokenSource
from headrace.io import ObjectStore
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

NAMES = ("plain", "with space", "a+b", "50%", "ünï")


def _jpeg(a: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(a).save(out, "JPEG", quality=90)
    return out.getvalue()


def _npy(a: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, a)
    return out.getvalue()


def _files() -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    files: dict[str, bytes] = {}
    for c, cls in enumerate(NAMES):
        for i, stem in enumerate(("x", "y z", "p+q", "r%20s", "é")):
            a = rng.integers(0, 256, (24 + c, 20 + i, 3), dtype=np.uint8)
            files[f"jpg/{cls}/{stem}.jpg"] = _jpeg(a)
            files[f"npy/{cls}/{stem}.npy"] = _npy(rng.standard_normal((4, 3)).astype(np.float32))
    return files


@pytest.fixture(params=["az", "gs"])
def cloud(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("azurite" if request.param == "az" else "fake_gcs")


_seeded: dict[str, Path] = {}


@pytest.fixture(name="data")
def data_fixture(cloud: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return data(cloud, tmp_path_factory)


def data(cloud: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files, local under the returned folder and in the cloud under ``s50``."""
    if cloud.endpoint not in _seeded:
        root = tmp_path_factory.mktemp("s50cloud")
        for key, body in _files().items():
            (root / key).parent.mkdir(parents=True, exist_ok=True)
            (root / key).write_bytes(body)
            cloud.put(f"s50/{key}", body)
        _seeded[cloud.endpoint] = root
    return _seeded[cloud.endpoint]


def _all(source: Any, seed: int = 1) -> list[tuple[str, dict[str, Any]]]:
    """Every sample of an epoch, one read each, with its file's name under the root."""
    out = []
    for i in range(source.samples_per_epoch):
        key = source.sample_keys(np.array([i]))[0]
        out.append((key, source.read(seed, np.array([i], dtype=np.int64))))
    return out


def _same(a: list[Any], b: list[Any]) -> None:
    # Names as a file's folder and base name: a list names its files in full.
    assert [k.split("/")[-2:] for k, _ in a] == [k.split("/")[-2:] for k, _ in b]
    for (_, x), (_, y) in zip(a, b, strict=True):
        assert sorted(x) == sorted(y)
        for k in x:
            np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(y[k]))


@pytest.mark.parametrize("fmt", ["jpeg", "npy"])
def test_folders_give_the_local_samples(cloud: Any, data: Path, fmt: str) -> None:
    sub = "jpg" if fmt == "jpeg" else "npy"
    local = FileSource(data / sub, format=fmt, labels="folders")
    remote = FileSource(
        cloud.url(prefix=f"s50/{sub}"), format=fmt, labels="folders", store_options=cloud.options()
    )
    assert remote.classes == local.classes
    _same(_all(remote), _all(local))


def test_a_glob_gives_the_local_samples(cloud: Any, data: Path) -> None:
    local = FileSource(str(data / "jpg" / "*" / "*.jpg"), format="jpeg", labels="folders")
    url = cloud.url(prefix="s50/jpg") + "/*/*.jpg"
    remote = FileSource(url, format="jpeg", labels="folders", store_options=cloud.options())
    assert remote.classes == local.classes
    _same(_all(remote), _all(local))


def test_a_list_of_odd_object_urls(cloud: Any, data: Path) -> None:
    names = sorted(k for k in _files() if k.startswith("npy/"))
    local = FileSource([str(data / k) for k in names], format="npy")
    urls = [cloud.url(prefix=f"s50/{k}") for k in names]
    remote = FileSource(urls, format="npy", store_options=cloud.options())
    _same(_all(remote), _all(local))


def test_cache_dir_serves_the_second_epoch(cloud: Any, data: Path, tmp_path: Path) -> None:
    local = _all(FileSource(data / "npy", format="npy", labels="folders"))
    url = cloud.url(prefix="s50/npy")
    for _ in range(2):
        remote = FileSource(
            url,
            format="npy",
            labels="folders",
            store_options=cloud.options(),
            cache_dir=tmp_path / "cache",
        )
        _same(_all(remote), local)
        remote.close()
    assert any(p.is_file() for p in (tmp_path / "cache").rglob("*"))


def test_folder_markers_are_not_samples(cloud: Any, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    for key in ("a/1.npy", "a/2.npy", "b/1.npy"):
        body = _npy(rng.standard_normal(3).astype(np.float32))
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(body)
        cloud.put(f"s50m/{key}", body)
    for marker in ("", "a/", "b/"):  # the console's "Create folder"
        cloud.put(f"s50m/{marker}", b"")
    local = FileSource(tmp_path, format="npy", labels="folders")
    remote = FileSource(
        cloud.url(prefix="s50m"), format="npy", labels="folders", store_options=cloud.options()
    )
    assert remote.classes == local.classes
    _same(_all(remote), _all(local))


def test_a_prefix_of_more_than_a_page_lists_whole(fake_gcs: Any, tmp_path: Path) -> None:
    # Flat, then in folders with odd names: on GCS a prefix past 1,000 keys is listed in
    # ranges at once (headrace's own), cut at folders. (An Azure listing is obstore's,
    # page after page: past Azurite's 5,000 keys a page, its 5,100 uploads took 30 s.)
    cloud = fake_gcs
    keys = [f"k{i:05d}.bin" for i in range(1_100)]
    keys += [f"{d}/{i:04d}.bin" for d in NAMES for i in range(60)]
    keys.sort()
    with ObjectStore(cloud.url(prefix="s50page"), **cloud.options()) as store:
        with cf.ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda k: cloud.put(f"s50page/{k}", k.encode()), keys))
        listed = store.list()
    assert [k for k, _ in listed] == keys
    src = FileSource(cloud.url(prefix="s50page"), store_options=cloud.options())
    assert src.samples_per_epoch == len(keys)


def test_an_object_deleted_after_listing_is_named(cloud: Any, tmp_path: Path) -> None:
    for i in range(3):
        cloud.put(f"s50del/{i}.npy", _npy(np.arange(4) + i))
    remote = FileSource(cloud.url(prefix="s50del"), format="npy", store_options=cloud.options())
    with ObjectStore(cloud.url(prefix="s50del"), **cloud.options()) as store:
        obstore.delete(store._live(), "1.npy")
    with pytest.raises(ObjectNotFoundError, match=r"s50del/1\.npy"):
        _all(remote)


def test_a_misspelt_config_key_is_named(cloud: Any, data: Path) -> None:
    opts = cloud.options()
    opts["config"] = {"bogus_key": "x"}
    with pytest.raises(HeadraceError, match="bogus_key"):
        FileSource(cloud.url(prefix="s50/npy"), format="npy", store_options=opts)


def _llmc(tokens: np.ndarray) -> bytes:
    header = np.zeros(256, np.int32)
    header[:3] = (20240520, 1, len(tokens))
    return header.tobytes() + tokens.astype(np.uint16).tobytes()


def test_token_shards_under_a_prefix(cloud: Any, tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    (tmp_path / "fineweb").mkdir()
    for name in ("fineweb_train_000001.bin", "fineweb_train_000002.bin", "a b+c%.bin"):
        body = _llmc(rng.integers(0, 50_000, 20_001))
        (tmp_path / "fineweb" / name).write_bytes(body)
        cloud.put(f"s50tok/fineweb/{name}", body)
    cloud.put("s50tok/fineweb/", b"")  # a folder marker
    kw: dict[str, Any] = {"context": 64, "window_bytes": 64 << 10, "block_bytes": 16 << 10}

    def digest(source: Any) -> str:
        return batch_digest(Loader(source, batch_size=8, seed=1, steps=40))

    want = digest(TokenSource(tmp_path / "fineweb", **kw))
    url = cloud.url(prefix="s50tok/fineweb")
    assert digest(TokenSource(url + "/", store_options=cloud.options(), **kw)) == want
    glob = TokenSource(url + "/*.bin", store_options=cloud.options(), **kw)
    assert digest(glob) == want


def test_parquet_with_odd_names(cloud: Any, tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    (tmp_path / "t").mkdir()
    for i, name in enumerate(("part 0.parquet", "part+1.parquet", "50%.parquet", "é.parquet")):
        table = pa.table({"x": rng.standard_normal(300), "y": np.arange(300) + 300 * i})
        pq.write_table(table, tmp_path / "t" / name, row_group_size=100)
        cloud.put(f"s50tab/{name}", (tmp_path / "t" / name).read_bytes())
    cloud.put("s50tab/", b"")

    def digest(source: Any) -> str:
        return batch_digest(Loader(source, batch_size=32, seed=2, steps=50))

    kw: dict[str, Any] = {"columns": ["x", "y"], "window_rows": 300}
    want = digest(TableSource(tmp_path / "t", **kw))
    url = cloud.url(prefix="s50tab")
    assert digest(TableSource(url, store_options=cloud.options(), **kw)) == want
    assert digest(TableSource(url + "/*.parquet", store_options=cloud.options(), **kw)) == want


def test_azure_hierarchical_directories(azurite: Any, tmp_path: Path) -> None:
    # A storage account with a hierarchical namespace lists each directory as a blob
    # of 0 bytes named without a '/', with metadata hdi_isfolder=true (which obstore
    # leaves out of a listing); a tool that copies it may drop the metadata ('a').
    rng = np.random.default_rng(6)
    for key in ("a/1.npy", "a/2.npy", "b/1.npy", "b/c/1.npy"):
        body = _npy(rng.standard_normal(3).astype(np.float32))
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(body)
        azurite.put(f"s50hns/{key}", body)
    with ObjectStore(azurite.url(prefix=""), **azurite.options()) as st:
        for d in ("s50hns", "s50hns/b", "s50hns/b/c"):
            obstore.put(st._live(), d, b"", attributes={"hdi_isfolder": "true"})
        obstore.put(st._live(), "s50hns/a", b"")
    local = FileSource(tmp_path, format="npy", labels="folders")
    remote = FileSource(
        azurite.url(prefix="s50hns"),
        format="npy",
        labels="folders",
        store_options=azurite.options(),
    )
    assert remote.classes == local.classes
    _same(_all(remote), _all(local))


def test_a_token_prefix_named_without_its_slash_is_told_to_end_with_one(
    cloud: Any, tmp_path: Path
) -> None:
    # An Azure Data Lake directory is an empty blob named as the folder (and obstore puts
    # 'x/' as 'x' on Azure): the prefix without its '/' was read as a token file of 0
    # bytes ("raw token file needs a dtype"), where GCS said to end it with '/'.

    body = _llmc(np.arange(5_000) % 50_000)
    cloud.put("s50dir/shards/fineweb_train_000001.bin", body)
    cloud.put("s50dir/shards/", b"")
    url = cloud.url(prefix="s50dir/shards")
    with pytest.raises(ObjectNotFoundError, match=r"end it with '/'"):
        TokenSource(url, context=64, store_options=cloud.options())
    with pytest.raises(ObjectNotFoundError, match=r"end it with '/'"):
        TokenSource(url, context=64, dtype="uint16", store_options=cloud.options())
    assert TokenSource(url + "/", context=64, store_options=cloud.options()).samples_per_epoch


@pytest.mark.parametrize(
    ("url", "meant"),
    [
        ("gcs://headrace-test/s50/npy", "write 'gs://headrace-test/s50/npy'"),
        (
            "wasbs://headrace-test@devstoreaccount1.blob.core.windows.net/s50/npy",
            "write 'az://headrace-test/s50/npy' with store_options "
            "{'config': {'account_name': 'devstoreaccount1'}}",
        ),
    ],
)
def test_another_tools_scheme_is_told_what_to_write(url: str, meant: str) -> None:
    # With store_options (as every emulator or service-account user passes them), it was
    # "not local files; leave store_options out for local files": the wrong way.

    with pytest.raises(ConfigError, match="not a URL scheme headrace reads") as e:
        FileSource(url, format="npy", store_options={"config": {"a": "b"}})
    assert meant in str(e.value)


# -- credentials: each scheme's own (io/_retry.py said S3's of every store) -------------


def test_a_wrong_azure_key_names_the_store_option(azurite: Any) -> None:

    opts = azurite.options()
    opts["config"] = {**opts["config"], "account_key": "d3Jvbmcga2V5"}
    with pytest.raises(PermissionDeniedError, match="account_key"):
        FileSource(azurite.url(prefix="s50"), format="npy", store_options=opts)


def test_gcs_without_credentials_is_not_told_of_aws_keys(
    fake_gcs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:

    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_SERVICE_ACCOUNT"):
        monkeypatch.delenv(name, raising=False)
    opts = {"client_options": {"allow_http": True}, "retry": fake_gcs.options()["retry"]}
    with pytest.raises(PermissionDeniedError) as e:
        FileSource("gs://headrace-test/s50/npy", format="npy", store_options=opts)
    assert "AWS_" not in str(e.value) and "service_account" in str(e.value)


@pytest.mark.parametrize(
    "url",
    [
        "abfss://headrace-test@devstoreaccount1.dfs.core.windows.net/s50/npy",
        "abfs://headrace-test@devstoreaccount1.dfs.core.windows.net/s50/npy",
        "azure://headrace-test/s50/npy",
        "adl://headrace-test/s50/npy",  # (read as a local path until 2026-12-07)
        "https://devstoreaccount1.blob.core.windows.net/headrace-test/s50/npy",
    ],
)
def test_azure_spellings_users_paste_give_the_local_samples(
    azurite: Any, tmp_path_factory: pytest.TempPathFactory, url: str
) -> None:
    # The endpoint option sends each to Azurite; the URL names account and container.
    root = data(azurite, tmp_path_factory)
    local = FileSource(root / "npy", format="npy", labels="folders")
    remote = FileSource(url, format="npy", labels="folders", store_options=azurite.options())
    assert remote.files.url == url and remote.classes == local.classes
    _same(_all(remote), _all(local))


def test_azure_without_an_account_names_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    # Azure's own "Account must be specified" named no option (until 2026-12-07).
    for name in ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT", "AZURE_ACCOUNT_NAME"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match=r"Account must be specified: .*'account_name'"):
        FileSource("az://container/npy", format="npy", store_options={"allow_http": True})
