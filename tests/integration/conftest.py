"""Session fixtures for tests against real endpoints on 127.0.0.1: S3 (moto), Azure Blob
(Azurite) and GCS (fake-gcs-server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from azutil import AzuriteFixture, start_azurite
from gcsutil import GCSFixture, start_fake_gcs
from s3util import FAST_RETRY, S3Fixture, StoreFactory, start_s3

from headrace.emulate import LatencyProxy
from headrace.io import ObjectStore

# Quick retries (FAST_RETRY) keep the fault tests fast; see s3util for its timeout.


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Fixture]:
    yield from start_s3(tmp_path_factory.mktemp("s3-local"))


@pytest.fixture(scope="session")
def _session_proxy(s3: S3Fixture) -> Iterator[LatencyProxy]:
    with LatencyProxy(s3.server.endpoint) as proxy:
        yield proxy


@pytest.fixture
def proxy(_session_proxy: LatencyProxy) -> Iterator[LatencyProxy]:
    """The session's proxy with no faults and zeroed counters."""
    _session_proxy.set_faults([])
    _session_proxy.reset_stats()
    yield _session_proxy
    _session_proxy.set_faults([])


@pytest.fixture
def open_store(s3: S3Fixture) -> Iterator[StoreFactory]:
    """``open_store(endpoint=None, url=None, **options)``: an ObjectStore closed after the test."""
    opened: list[ObjectStore] = []

    def factory(endpoint: str | None = None, url: str | None = None, **kw: object) -> ObjectStore:
        options = s3.options()
        if endpoint is not None:
            options["endpoint"] = endpoint
        options.setdefault("retry", FAST_RETRY)
        options.update(kw)
        store = ObjectStore(url or s3.url, **options)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def local_dir(s3: S3Fixture) -> Path:
    return s3.local_dir


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzuriteFixture]:
    """Azurite on 127.0.0.1 with ``s3util.OBJECTS`` under ``az://headrace-test/data``."""
    yield from start_azurite(tmp_path_factory.mktemp("az-local"))


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GCSFixture]:
    """fake-gcs-server on 127.0.0.1 with ``s3util.OBJECTS`` under ``gs://headrace-test/data``."""
    yield from start_fake_gcs(tmp_path_factory.mktemp("gs-local"))


@pytest.fixture(scope="session")
def fake_gcs_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GCSFixture]:
    """Another, whose objects are read over TLS at ``https_endpoint`` (written over HTTP)."""
    yield from start_fake_gcs(tmp_path_factory.mktemp("gs-tls"), https=True)
