"""A user's journey with data on Google Cloud Storage (fake-gcs-server) and on a partner
lab's Azure Blob Storage (Azurite), not S3: a token file, NPY folders, a Parquet dataset of
several shards, MDS shards and WebDataset tar shards, each uploaded with the emulator's own
API (fake-gcs-server's JSON upload, Azure's Put Blob through obstore, never headrace), then
read with shuffle, resumed, on 2 hosts, and each batch compared with the same loader over
the local files; and the Azure URLs and credentials such a user pastes."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _mds_files import write_mds
from headrace.errors import ConfigError
from headrace.formats import FileSource, MDSSource, TableSource, TokenSource
from headrace.io._object_open import AZURITE_KEY
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

pytestmark = pytest.mark.integration

PREFIX = "s52"


def _files(root: Path) -> dict[str, bytes]:
    """The dataset, written under ``root`` as its own tools write it; key -> bytes."""
    rng = np.random.default_rng(52)
    out: dict[str, bytes] = {
        "tokens/train.bin": rng.integers(0, 50_000, 40_000, np.uint16).tobytes()
    }
    for c in range(3):
        for i in range(4):
            b = io.BytesIO()
            np.save(b, rng.standard_normal((2, 3)).astype(np.float32))
            out[f"npy/class{c}/s{i}.npy"] = b.getvalue()
    for s in range(3):
        n = 20 + s
        table = pa.table({"id": np.arange(100 * s, 100 * s + n), "x": rng.standard_normal(n)})
        b = io.BytesIO()
        pq.write_table(table, b, row_group_size=8)
        out[f"parquet/part-{s:05d}.parquet"] = b.getvalue()
    for s in range(2):
        b = io.BytesIO()
        with tarfile.open(fileobj=b, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(4):
                for ext, data in (("cls", str(i).encode()), ("bin", rng.bytes(16))):
                    info = tarfile.TarInfo(f"{s:03d}{i:03d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        out[f"tar/shard-{s:04d}.tar"] = b.getvalue()
    samples = [{"x": rng.standard_normal(3).astype(np.float32), "y": i} for i in range(18)]
    write_mds(root / "mds", {"x": "ndarray:float32:3", "y": "int"}, samples, per_shard=5)
    for path in sorted((root / "mds").iterdir()):
        out[f"mds/{path.name}"] = path.read_bytes()
    for key, body in out.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(body)
    return out


_seeded: dict[str, Path] = {}


@pytest.fixture(params=["az", "gs"])
def cloud(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("azurite" if request.param == "az" else "fake_gcs")


@pytest.fixture
def root(cloud: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seeded(cloud, tmp_path_factory)


def seeded(cloud: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local copy; the same bytes under ``PREFIX`` in the cloud."""
    if cloud.endpoint not in _seeded:
        local = tmp_path_factory.mktemp("s52journey")
        for key, body in _files(local).items():
            cloud.put(f"{PREFIX}/{key}", body)
        _seeded[cloud.endpoint] = local
    return _seeded[cloud.endpoint]


SOURCES = {
    "tokens": (lambda at, o: TokenSource(f"{at}/tokens/train.bin", context=64, **o), 8),
    "npy": (lambda at, o: FileSource(f"{at}/npy", format="npy", labels="folders", **o), 4),
    "parquet": (lambda at, o: TableSource(f"{at}/parquet", **o), 6),
    "mds": (lambda at, o: MDSSource(f"{at}/mds", **o), 4),
    "tar": (lambda at, o: FileSource(f"{at}/tar", format="tar", **o), 2),
}


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_every_format_reads_the_local_batches_shuffled_resumed_on_two_hosts(
    cloud: Any, root: Path, kind: str
) -> None:
    make, batch = SOURCES[kind]
    remote = {"store_options": cloud.options()}

    def digests(at: str, options: dict[str, Any], **kw: Any) -> list[str]:
        with Loader(make(at, options), batch_size=batch, seed=3, steps=12, **kw) as loader:
            return [batch_digest([b]) for b in loader]

    url = cloud.url(prefix=PREFIX)
    assert digests(url, remote) == digests(str(root), {})
    for rank in (0, 1):
        hosts = {"rank": rank, "world_size": 2}
        assert digests(url, remote, **hosts) == digests(str(root), {}, **hosts)
    assert_resume_exact(
        lambda: Loader(make(url, remote), batch_size=batch, seed=3, steps=12),
        steps=12,
        resume_at=[1, 7],
    )


# -- Azure URLs that name the account ------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        f"https://otheraccount.blob.core.windows.net/headrace-test/{PREFIX}/npy",
        f"abfss://headrace-test@otheraccount.dfs.core.windows.net/{PREFIX}/npy",
    ],
)
def test_an_azure_url_of_another_account_than_the_options_is_refused(
    azurite: Any, tmp_path_factory: pytest.TempPathFactory, url: str
) -> None:
    seeded(azurite, tmp_path_factory)
    # obstore takes config's account_name over the URL's: the partner lab's URL with the
    # options of one's own account read one's own account's container of that name.
    with pytest.raises(ConfigError, match=r"otheraccount.*devstoreaccount1") as e:
        FileSource(url, format="npy", store_options=azurite.options())
    assert "account_name" in str(e.value)


# -- Azure connection strings (what the portal's "Access keys" page gives) ------------------


def _connection_string(azurite: Any) -> str:
    return (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        f"AccountKey={AZURITE_KEY};BlobEndpoint={azurite.endpoint}/devstoreaccount1;"
    )


def test_a_connection_string_in_config_is_told_as_the_options_to_give(
    azurite: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # obstore's own words were "Configuration key: 'connection_string' is not valid".
    root = seeded(azurite, tmp_path_factory)
    options = {"config": {"connection_string": _connection_string(azurite)}}
    with pytest.raises(ConfigError, match="connection string") as e:
        FileSource(azurite.url(prefix=PREFIX) + "/npy", format="npy", store_options=options)
    said = str(e.value)
    assert "'account_name': 'devstoreaccount1'" in said
    assert f"'endpoint': '{azurite.endpoint}/devstoreaccount1'" in said
    assert AZURITE_KEY not in said  # a secret is not printed into a log
    # What it says to give reads the local samples.
    told = {
        "config": {"account_name": "devstoreaccount1", "account_key": AZURITE_KEY},
        "endpoint": f"{azurite.endpoint}/devstoreaccount1",
    }
    remote = FileSource(azurite.url(prefix=PREFIX) + "/npy", format="npy", store_options=told)
    local = FileSource(root / "npy", format="npy")
    with (
        Loader(remote, batch_size=4, seed=1, steps=3) as a,
        Loader(local, batch_size=4, seed=1, steps=3) as b,
    ):
        assert [batch_digest([x]) for x in a] == [batch_digest([x]) for x in b]


def test_a_connection_string_in_the_environment_is_named(
    azurite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Azure's SDKs, adlfs and MLflow read AZURE_STORAGE_CONNECTION_STRING; obstore does
    # not, and "Account must be specified" left the user to wonder why.
    for name in ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT", "AZURE_ACCOUNT_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", _connection_string(azurite))
    with pytest.raises(ConfigError, match="AZURE_STORAGE_CONNECTION_STRING") as e:
        FileSource("az://headrace-test/s52/npy", format="npy")
    said = str(e.value)
    assert "AZURE_STORAGE_ACCOUNT_NAME" in said and "'account_name': 'devstoreaccount1'" in said
    assert AZURITE_KEY not in said


@pytest.mark.parametrize(
    ("url", "meant"),
    [
        (
            "az://headrace-test@devstoreaccount1/s52/npy",
            "abfss://headrace-test@devstoreaccount1.dfs.core.windows.net/s52/npy",
        ),
        (
            "azure://headrace-test@devstoreaccount1.blob.core.windows.net/s52/npy",
            "abfss://headrace-test@devstoreaccount1.dfs.core.windows.net/s52/npy",
        ),
        (
            "az://devstoreaccount1.blob.core.windows.net/headrace-test/s52/npy",
            "https://devstoreaccount1.blob.core.windows.net/headrace-test/s52/npy",
        ),
        (
            "abfss://devstoreaccount1.dfs.core.windows.net/headrace-test/s52/npy",
            "https://devstoreaccount1.dfs.core.windows.net/headrace-test/s52/npy",
        ),
    ],
)
def test_an_azure_url_in_a_form_obstore_cannot_read_names_the_one_to_write(
    azurite: Any, tmp_path_factory: pytest.TempPathFactory, url: str, meant: str
) -> None:
    # obstore's words were "Generic S3 error: URL did not match any known pattern".
    root = seeded(azurite, tmp_path_factory)
    with pytest.raises(ConfigError, match="write") as e:
        FileSource(url, format="npy", store_options=azurite.options())
    assert meant in str(e.value) and "S3" not in str(e.value)
    remote = FileSource(meant, format="npy", store_options=azurite.options())
    local = FileSource(root / "npy", format="npy")
    with (
        Loader(remote, batch_size=4, seed=1, steps=3) as a,
        Loader(local, batch_size=4, seed=1, steps=3) as b,
    ):
        assert [batch_digest([x]) for x in a] == [batch_digest([x]) for x in b]
