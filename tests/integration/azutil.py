"""Azurite (Microsoft's Azure Storage emulator, an npm package) on 127.0.0.1 for az:// tests.

``scripts/setup-test-env`` installs it under ``.azurite/`` (or put ``azurite-blob``
on PATH: ``npm install -g azurite``); without it the tests that need it skip.
One Azurite per session, with the objects of ``s3util.OBJECTS`` uploaded by
obstore under ``az://headrace-test/data`` and written as local files beside.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import shutil
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import obstore as obs
import pytest
from emulators import supervised
from obstore.store import AzureStore
from s3util import FAST_RETRY, PREFIX, seed_objects

from headrace.emulate._server import ServerProcess
from headrace.io._object_open import AZURITE_ACCOUNT, AZURITE_KEY

CONTAINER = "headrace-test"
REPO = Path(__file__).resolve().parents[2]
INSTALL = "run scripts/setup-test-env, or: npm install --prefix .azurite azurite@3"


def find_azurite() -> list[str] | None:
    """The command that runs ``azurite-blob``: the repository's install, else PATH's."""
    local = REPO / ".azurite" / "node_modules" / ".bin" / "azurite-blob"
    found = str(local) if local.exists() else shutil.which("azurite-blob")
    node = shutil.which("node")
    if found is None or node is None:
        return None
    return [node, str(Path(found).resolve())]


def _shared_key_put(endpoint: str, path: str, query: dict[str, str]) -> None:
    """A signed PUT with no body (Azure's Shared Key scheme): creates a container.

    obstore has no call that creates a container, so this one request is made by hand.
    """
    headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": "2021-08-06"}
    canonical = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
    resource = f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{path}"
    resource += "".join(f"\n{k}:{v}" for k, v in sorted(query.items()))
    # VERB, then 11 standard headers (all empty here), then x-ms-* headers and the resource.
    to_sign = "PUT\n" + "\n" * 11 + canonical + resource
    mac = hmac.new(base64.b64decode(AZURITE_KEY), to_sign.encode(), hashlib.sha256)
    signature = base64.b64encode(mac.digest()).decode()
    url = f"{endpoint}/{AZURITE_ACCOUNT}/{path}?" + "&".join(f"{k}={v}" for k, v in query.items())
    request = urllib.request.Request(
        url,
        method="PUT",
        headers={**headers, "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{signature}"},
    )
    with urllib.request.urlopen(request, timeout=10):
        pass


@dataclass
class AzuriteFixture:
    server: ServerProcess
    local_dir: Path  # the same objects as plain files

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def url(self, container: str = CONTAINER, prefix: str = PREFIX) -> str:
        return f"az://{container}/{prefix}"

    def options(self, **extra: Any) -> dict[str, Any]:
        """ObjectStore options naming the account, its key and its path-style endpoint."""
        config = {
            "account_name": AZURITE_ACCOUNT,
            "account_key": AZURITE_KEY,
            "endpoint": f"{self.endpoint}/{AZURITE_ACCOUNT}",
        }
        return {"config": config, "allow_http": True, "retry": FAST_RETRY, **extra}

    def emulator_options(self) -> dict[str, Any]:
        """The short form: ``use_emulator`` and where the emulator is."""
        return {"endpoint": self.endpoint, "config": {"use_emulator": True}, "retry": FAST_RETRY}

    def create_container(self, name: str) -> None:
        _shared_key_put(self.endpoint, name, {"restype": "container"})

    def put(self, key: str, data: bytes, container: str = CONTAINER) -> None:
        """Upload ``key`` (a full blob name) with obstore."""
        store = AzureStore(
            container,
            account_name=AZURITE_ACCOUNT,
            account_key=AZURITE_KEY,
            endpoint=f"{self.endpoint}/{AZURITE_ACCOUNT}",
            client_options={"allow_http": True},
        )
        obs.put(store, key, data)


def start_azurite(tmp_root: Path) -> Iterator[AzuriteFixture]:
    argv = find_azurite()
    if argv is None:
        pytest.skip(f"Azurite is not installed (needs node and azurite-blob): {INSTALL}")
    workspace = tmp_root / "azurite"
    workspace.mkdir()
    server = supervised(
        "azurite-blob",
        lambda port: [
            *argv,
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--location",
            str(workspace),
            "--silent",
            "--skipApiVersionCheck",
            "--disableTelemetry",  # it reports usage to Microsoft otherwise
        ],
        ready_path=f"/{AZURITE_ACCOUNT}?comp=list",
    ).start()
    try:
        fixture = AzuriteFixture(server=server, local_dir=tmp_root / PREFIX)
        fixture.create_container(CONTAINER)
        seed_objects(fixture.put, fixture.local_dir)
        yield fixture
    finally:
        server.stop()
