"""A GCS or Azure user's bench from the command line (``headrace gen`` and ``headrace
bench`` with ``--endpoint`` and ``--store-option``, on fake-gcs-server and Azurite), and
a glob over plain HTTP, which cannot list: refused by name, by every source."""

from __future__ import annotations

import hashlib
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from azutil import CONTAINER as AZ_CONTAINER
from gcsutil import BUCKET as GCS_BUCKET
from httputil import serve

from headrace._store_option import store_options
from headrace.bench._upload import DIGEST_KEY, digest_key_of, upload_files
from headrace.cli import main
from headrace.errors import ObjectNotFoundError
from headrace.formats import FileSource, TableSource, TokenSource
from headrace.io import ObjectStore
from headrace.io._object_open import AZURITE_ACCOUNT, AZURITE_KEY

pytestmark = pytest.mark.integration


@pytest.fixture
def http_folder(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    with serve(tmp_path) as url:
        yield url, tmp_path


_NO_HTTP_GLOB = r"a glob pattern cannot be expanded over http\(s\).*pass the list of URLs"


def test_a_glob_over_http_is_refused_by_every_source(http_folder: tuple[str, Path]) -> None:
    # TableSource said "no such object (... shard-*.parquet not found ...)"; FileSource and
    # TokenSource told of a listing the server refused (HTTP 501 to a PROPFIND).
    url, root = http_folder
    for i in range(2):
        pq.write_table(pa.table({"x": np.arange(4) + 4 * i}), root / f"shard-{i}.parquet")
        np.arange(64, dtype=np.uint16).tofile(root / f"t{i}.bin")
        np.save(root / f"s{i}.npy", np.arange(3))
    with pytest.raises(ObjectNotFoundError, match=_NO_HTTP_GLOB):
        TableSource(f"{url}/shard-*.parquet")
    with pytest.raises(ObjectNotFoundError, match=_NO_HTTP_GLOB):
        TableSource([f"{url}/shard-0.parquet", f"{url}/shard-[1].parquet"])
    with pytest.raises(ObjectNotFoundError, match=_NO_HTTP_GLOB):
        TokenSource(f"{url}/t*.bin", dtype="uint16", context=8)
    with pytest.raises(ObjectNotFoundError, match=_NO_HTTP_GLOB):
        FileSource(f"{url}/s*.npy")
    # The list of URLs the message asks for reads them.
    src = TableSource([f"{url}/shard-{i}.parquet" for i in range(2)])
    assert len(src) == 8


def test_an_http_object_named_with_a_wildcard_character_is_read_as_written(
    http_folder: tuple[str, Path],
) -> None:
    url, root = http_folder
    pq.write_table(pa.table({"x": np.arange(5)}), root / "odd[1].parquet")
    np.arange(64, dtype=np.uint16).tofile(root / "t[1].bin")
    assert len(TableSource(f"{url}/odd[1].parquet")) == 5
    TokenSource(f"{url}/t[1].bin", dtype="uint16", context=8)


# -- headrace gen and headrace bench on GCS and Azure, from the command line ---------------


def _cloud(store: str, fake_gcs: Any, azurite: Any, tmp: Path) -> tuple[str, list[str]]:
    """A bucket's URL for a run, and the flags that reach it (endpoint, credentials)."""
    if store == "gs":
        # (config.skip_signature=true reads the emulator, but a write still asks for a token)
        key = tmp / "key.json"
        key.write_text(fake_gcs.options()["config"]["service_account_key"])
        flags = [
            "--endpoint",
            fake_gcs.endpoint,
            "--store-option",
            f"config.service_account={key}",
            "--store-option",
            "allow_http=true",
        ]
        return f"gs://{GCS_BUCKET}", flags
    flags = [
        "--endpoint",
        f"{azurite.endpoint}/{AZURITE_ACCOUNT}",
        "--store-option",
        f"config.account_name={AZURITE_ACCOUNT}",
        "--store-option",
        f"config.account_key={AZURITE_KEY}",
    ]
    return f"az://{AZ_CONTAINER}", flags


def _seed_gcs(fake_gcs: Any, url: str, root: Path) -> None:
    """The token file and its sidecar under ``url``, with the digest gen keeps."""
    prefix = url.split("/", 3)[3]
    for path in root.rglob("tokens-*"):
        name = f"{prefix}/{path.relative_to(root).as_posix()}"
        data = path.read_bytes()
        meta = {"name": name, "metadata": {DIGEST_KEY: hashlib.sha256(data).hexdigest()}}
        body = b"".join(
            [
                b"--B\r\nContent-Type: application/json\r\n\r\n",
                json.dumps(meta).encode(),
                b"\r\n--B\r\nContent-Type: application/octet-stream\r\n\r\n",
                data,
                b"\r\n--B--\r\n",
            ]
        )
        at = f"{fake_gcs.endpoint}/upload/storage/v1/b/{GCS_BUCKET}/o?uploadType=multipart"
        request = urllib.request.Request(
            at, data=body, method="POST", headers={"Content-Type": "multipart/related; boundary=B"}
        )
        with urllib.request.urlopen(request, timeout=10):
            pass


_RUN = ["--steps", "2", "--trials", "1", "--warmup", "0", "--no-isolate", "-q"]


@pytest.mark.parametrize("store", ["gs", "az"])
def test_gen_then_bench_of_a_gcs_or_azure_bucket_from_the_command_line(
    store: str,
    fake_gcs: Any,
    azurite: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # gen --root gs://... refused --endpoint ("names an S3-compatible endpoint") and took
    # no --store-option; bench had neither, and --storage-url took s3:// alone.
    monkeypatch.setenv("AWS_REGION", "us-east-1")  # (S3's: not given to a gs:// store)
    bucket, flags = _cloud(store, fake_gcs, azurite, tmp_path)
    url = f"{bucket}/bench-{tmp_path.name}/tok"
    size = ["--token-file-gib", "0.0005"]
    staging = str(tmp_path / "staging")
    written = "2 written"
    if store == "gs":
        # This fake-gcs-server refuses obstore's PUT (XML API): the objects go up as gen
        # would write them, digest and all, by its JSON API; gen then finds them there.
        assert main(["gen", "tokens", *size, "-q", "--root", staging]) == 0
        _seed_gcs(fake_gcs, url, Path(staging))
        written = "0 written"
    gen = ["gen", "tokens", *size, "-q", "--root", url, "--staging", staging, *flags]
    assert main(gen) == 0, capsys.readouterr().err
    said = capsys.readouterr().out
    assert written in said and f"--storage-url {url}" in said, said
    # Written as the local copy's bytes.
    options = {**store_options(flags[3::2]), "endpoint": flags[1]}
    local = next(Path(staging).rglob("*.bin"))
    with ObjectStore(url, **options) as objects:
        assert bytes(objects.get(local.name)) == local.read_bytes()
    reports = {}
    for where, args in {
        "local": ["--root", staging],
        store: ["--root", staging, "--storage-url", url, *flags],
    }.items():
        out = tmp_path / f"{where}.json"
        bench = ["bench", "-w", "tokens", *size, *_RUN, *args, "--json", str(out)]
        assert main(bench) == 0, capsys.readouterr().err
        reports[where] = {r["variant"]: r["digest"] for r in json.loads(out.read_text())["results"]}
    remote = {v: d for v, d in reports[store].items() if d}
    assert remote, reports
    for variant, digest in remote.items():
        assert reports["local"][variant] == digest, variant


def test_an_upload_to_azure_keeps_its_digest_under_a_name_azure_takes(
    azurite: Any, tmp_path: Path
) -> None:
    # Azure's metadata names are C# identifiers: "headrace-sha256" was refused
    # (InvalidMetadata), and every headrace gen --root az://... failed.
    path = tmp_path / "a.bin"
    path.write_bytes(b"x" * 1000)
    url = f"az://{AZ_CONTAINER}/digest-{tmp_path.name}"
    with ObjectStore(url, **azurite.options()) as store:
        first = upload_files(store, [("a.bin", str(path))])
        again = upload_files(store, [("a.bin", str(path))])
        kept = store.attributes("a.bin")[digest_key_of(url)]
    assert (first.written, again.written, again.skipped) == (1, 0, 1)
    assert kept == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--storage-url", "gs://b/x", "--latency-ms", "5"],
            "put a proxy in front of an S3 endpoint; gs://b/x is read as it is",
        ),
        (["--storage-url", "gs:///x"], "names no bucket"),
        (["--store-option", "config.account_name=a"], "store_options are for headrace gen"),
        (
            ["--storage", "slowfs", "--store-option", "region=x"],
            "--store-option is for --storage s3",
        ),
        (
            ["--storage-url", "s3://b/x", "--endpoint", "http://127.0.0.1:9", "--store-option",
             "access_key_id=K"],
            "AWS_ACCESS_KEY_ID",
        ),
    ],
)  # fmt: skip
def test_bench_store_flags_that_cannot_work_are_refused_by_name(
    args: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = ["bench", "-w", "tokens", "--token-file-gib", "0.0001", *_RUN, "--root"]
    assert main([*bench, str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err
