"""The command line of a GCS or Azure user, on the emulators (fake-gcs-server, Azurite):
``headrace probe`` with an endpoint, ``--store-option config.KEY=VALUE`` for the options
obstore takes only in ``config``, and the messages for missing or wrong credentials and
for an ``az://`` URL that names the account where the container goes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from s3util import OBJECTS

from headrace.cli import main
from headrace.errors import ObjectNotFoundError, PermissionDeniedError
from headrace.io import ObjectStore
from headrace.io._object_open import AZURITE_ACCOUNT, AZURITE_KEY

pytestmark = pytest.mark.integration

_AZURE_ENV = (
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT",
    "AZURE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_USE_EMULATOR",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_TOKEN",
    "AZURE_STORAGE_CONNECTION_STRING",
)


@pytest.fixture(autouse=True)
def _no_cloud_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _AZURE_ENV:
        monkeypatch.delenv(name, raising=False)
    for name in ("GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_KEY", "GOOGLE_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    # A machine's AWS region (set on many a cloud VM) is S3's: a probe of az:// with it
    # was refused, "region applies to s3:// URLs only".
    monkeypatch.setenv("AWS_REGION", "us-east-1")


def _probed(args: list[str], out: Path) -> dict[str, Any]:
    assert main(["probe", *args, "--ops", "8", "--json", str(out)]) == 0
    report: dict[str, Any] = json.loads(out.read_text())
    assert report["file_bytes"] == OBJECTS["big.bin"]
    assert report["results"] and all(r["verified"] for r in report["results"])
    return report


# -- 1. headrace probe with an endpoint ---------------------------------------------------


def test_probe_of_azurite_with_an_endpoint(
    azurite: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "path_style applies to s3:// URLs only": probe passed S3's options for any URL.
    monkeypatch.setenv("AZURE_STORAGE_USE_EMULATOR", "true")
    url = f"{azurite.url()}/big.bin"
    report = _probed([url, "--endpoint", azurite.endpoint], tmp_path / "az.json")
    assert report["filesystem"]["fstype"] == "az"
    assert report["filesystem"]["device"] == azurite.endpoint


def test_probe_of_azurite_with_the_account_as_store_options(azurite: Any, tmp_path: Path) -> None:
    url = f"{azurite.url()}/big.bin"
    args = [
        url,
        "--endpoint",
        f"{azurite.endpoint}/{AZURITE_ACCOUNT}",
        "--store-option",
        f"config.account_name={AZURITE_ACCOUNT}",
        "--store-option",
        f"config.account_key={AZURITE_KEY}",
    ]
    _probed(args, tmp_path / "az.json")


def test_probe_of_fake_gcs_with_an_endpoint(fake_gcs: Any, tmp_path: Path) -> None:
    url = f"{fake_gcs.url()}/big.bin"
    args = [url, "--endpoint", fake_gcs.endpoint, "--store-option", "config.skip_signature=true"]
    report = _probed(args, tmp_path / "gs.json")
    assert report["filesystem"]["device"] == fake_gcs.endpoint


def test_probe_of_fake_gcs_with_a_service_account_key(fake_gcs: Any, tmp_path: Path) -> None:
    key = fake_gcs.options()["config"]["service_account_key"]  # names the emulator's URL
    url = f"{fake_gcs.url()}/big.bin"
    # The key names the emulator's http:// URL: plain HTTP allowed, as the refusal says.
    args = [url, "--store-option", f"config.service_account_key={key}"]
    _probed([*args, "--store-option", "allow_http=true"], tmp_path / "gs.json")


# -- 2. --store-option config.KEY=VALUE ----------------------------------------------------


def test_check_takes_azure_and_gcs_config_keys_on_the_command_line(
    azurite: Any, fake_gcs: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key_file = tmp_path / "key.json"
    key_file.write_text(fake_gcs.options()["config"]["service_account_key"])
    runs = {
        azurite.url(): [
            f"endpoint={azurite.endpoint}/{AZURITE_ACCOUNT}",
            f"config.account_name={AZURITE_ACCOUNT}",
            f"config.account_key={AZURITE_KEY}",
        ],
        fake_gcs.url(): [f"config.service_account={key_file}", "allow_http=true"],
    }
    for url, options in runs.items():
        args = ["check", f"{url}/small", "--format", "raw"]
        for option in options:
            args += ["--store-option", option]
        assert main(args) == 0, capsys.readouterr().err
        assert "48 samples read" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("config.=x", "config.KEY=VALUE"),
        ("retry.attempts=3", "config.KEY"),
        ("allow_http=maybe", "true or false"),
    ],
)
def test_a_store_option_that_cannot_be_read_is_refused(
    option: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "az://c/x", "--format", "raw", "--store-option", option]) == 2
    assert said in capsys.readouterr().err
    assert main(["probe", "az://c/x", "--store-option", option]) == 2
    assert said in capsys.readouterr().err


# -- 3. credential messages -----------------------------------------------------------------


def _error(url: str, **options: Any) -> str:
    with pytest.raises((PermissionDeniedError, ObjectNotFoundError)) as e:
        with ObjectStore(url, **options) as store:
            store.list()
    return str(e.value)


def test_gcs_without_credentials_names_google_s_ways_to_give_them(fake_gcs: Any) -> None:
    said = _error(fake_gcs.url(), endpoint=fake_gcs.endpoint)
    for words in (
        "GOOGLE_SERVICE_ACCOUNT",
        "GOOGLE_SERVICE_ACCOUNT_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "gcloud auth application-default login",
        "service_account_key",
    ):
        assert words in said, (words, said)
    assert "AWS" not in said


@pytest.mark.parametrize(
    "url",
    [
        "abfss://headrace-test@devstoreaccount1.dfs.core.windows.net/data",
        "https://devstoreaccount1.blob.core.windows.net/headrace-test/data",
    ],
)
def test_azure_url_naming_the_account_without_credentials_names_the_key_to_give(
    azurite: Any, url: str
) -> None:
    said = _error(url, endpoint=f"{azurite.endpoint}/{AZURITE_ACCOUNT}")
    # The account is the URL's: what is missing is its key, a SAS or a login.
    assert "devstoreaccount1" in said
    for words in ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_KEY", "az login"):
        assert words in said, (words, said)
    assert "AWS" not in said and "access_key_id" not in said


@pytest.mark.parametrize(
    "url",
    [
        "az://headrace-test/data",
        "https://devstoreaccount1.blob.core.windows.net/headrace-test/data",
    ],
)
def test_azurite_refusing_a_wrong_key_names_the_account_key(azurite: Any, url: str) -> None:
    # Azurite checks Shared Key signatures: a 403. The https:// form was told of a
    # server's bearer token header, as any web server's URL is.
    wrong = AZURITE_KEY[:-8] + "AAAAAAA="
    options = azurite.options()
    options["config"] = {**options["config"], "account_key": wrong}
    said = _error(url, **options)
    assert "access denied" in said and "account_key" in said and "SAS" in said
    assert "AZURE_STORAGE_ACCOUNT_KEY" in said and wrong not in said
    assert "Bearer TOKEN" not in said


def test_az_url_with_the_account_first_says_az_names_the_container(azurite: Any) -> None:
    said = _error(f"az://{AZURITE_ACCOUNT}/headrace-test/data", **azurite.options())
    assert "no such container" in said
    assert "names the container first" in said
    assert "az://headrace-test/data" in said
