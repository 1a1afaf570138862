"""Object stores on S3 (moto on 127.0.0.1), bug hunt s47: objects deleted under a running
source, and what a closed store or source still holds."""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, SMALL, S3Fixture, StoreFactory

from _mds_files import write_mds
from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import ObjectNotFoundError, TransientStorageError
from headrace.formats import FileSource, MDSSource
from headrace.io import ObjectStore

pytestmark = pytest.mark.integration


def _connections_to(port: int) -> set[str]:
    """This process's TCP sockets connected to ``port`` on 127.0.0.1 (the client side),
    by inode."""
    ours = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            ours.add(target[len("socket:[") : -1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if int(cols[2].rpartition(":")[2], 16) == port and cols[9] in ours:
                    found.add(cols[9])
    return found


def _settled(port: int, before: set[str]) -> set[str]:
    """The sockets of :func:`_connections_to` not among ``before``, once none is left (a
    dropped pool's connections close on obstore's runtime, not at once), or after 5 s.
    (Those of ``before``, other tests' clients, may close meanwhile.)"""
    gc.collect()
    deadline = time.monotonic() + 5
    while (new := _connections_to(port) - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    return new


def test_a_closed_store_holds_no_connection_while_referenced(s3: S3Fixture) -> None:
    # A closed ObjectStore kept obstore's store, and with it its pool of connections (one
    # per request it had in flight): 40 sockets held by each closed store still referenced
    # (a closed source keeps its stores), 200 after five, where a process opens and closes
    # many sources.
    port = int(s3.server.endpoint.rpartition(":")[2].rstrip("/"))
    kept = []
    before = _connections_to(port)  # the test client's (boto3), if pooled
    for _ in range(3):
        store = ObjectStore(s3.url, **{**s3.options(), "retry": FAST_RETRY})
        assert store.get_many(SMALL[:8], max_in_flight=8)
        assert _connections_to(port) - before  # pooled while open
        store.close()
        kept.append(store)
    assert not _settled(port, before)
    assert kept[0].keeps_metadata  # still says what the store is
    with pytest.raises(Exception, match="store is closed"):
        kept[0].get(SMALL[0])


def _mds_on_s3(s3: S3Fixture, tmp_path: Path, prefix: str) -> list[Path]:
    paths = write_mds(tmp_path, {"a": "int"}, [{"a": k} for k in range(40)], per_shard=10)
    client = s3.server.info.boto3_client()
    for p in sorted(tmp_path.iterdir()):
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{p.name}", Body=p.read_bytes())
    return paths


def test_a_shard_deleted_under_a_source_on_s3_is_said_as_such(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # Locally, a shard deleted during a run is "no such file now; the MDS source listed it
    # before, so it was deleted or moved while the run was reading it"; on S3 it was the
    # store's bare 404 ("no such object (Object at location ... not found ...)").
    prefix = "changes-s47/gone"
    paths = _mds_on_s3(s3, tmp_path, prefix)
    options = {**s3.options(), "retry": FAST_RETRY}
    with MDSSource(f"s3://{BUCKET}/{prefix}", store_options=options, shuffle=False) as src:
        src.read(0, np.arange(10))
        s3.server.info.boto3_client().delete_object(Bucket=BUCKET, Key=f"{prefix}/{paths[2].name}")
        with pytest.raises(ObjectNotFoundError) as caught:
            src.read(0, np.arange(20, 30))
    said = str(caught.value)
    assert f"s3://{BUCKET}/{prefix}/{paths[2].name}, bytes [" in said
    assert "deleted or moved while the run was reading it" in said
    assert "open a new source" in said


def test_a_file_deleted_under_a_file_source_on_s3_is_said_as_such(s3: S3Fixture) -> None:
    # A whole-file GET (FileSource) of an object deleted after the listing gave the bare 404.
    prefix = "changes-s47/files"
    client = s3.server.info.boto3_client()
    for k in range(3):
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/f{k}.bin", Body=bytes([k]) * 64)
    options = {**s3.options(), "retry": FAST_RETRY}
    with FileSource(f"s3://{BUCKET}/{prefix}/", format="raw", store_options=options) as src:
        assert bytes(src.files.fetch(0)) == bytes(64)
        client.delete_object(Bucket=BUCKET, Key=f"{prefix}/f1.bin")
        with pytest.raises(ObjectNotFoundError) as caught:
            src.files.fetch(1)
    said = str(caught.value)
    assert f"s3://{BUCKET}/{prefix}/f1.bin: no such object now; the file source listed it " in said
    assert "deleted or moved while the run was reading it" in said
    assert "open a new file source over the objects there now" in said


def test_get_ranges_of_a_body_cut_short_is_a_named_error_not_a_panic(
    open_store: StoreFactory, proxy: LatencyProxy
) -> None:
    # A server answering a coalesced GET with fewer bytes than asked (a Content-Length that
    # matches them) made obstore panic as it cut the ranges out: a bare
    # pyo3_runtime.PanicException ("range start must not be greater than end: 3000 <=
    # 1550"), a BaseException, neither retried nor naming the object.
    store = open_store(endpoint=proxy.endpoint)
    proxy.set_faults([FaultRule(kind="short", match="GET ")])
    with pytest.raises(TransientStorageError) as caught:
        store.get_ranges(SMALL[0], [(0, 10), (3000, 100)])
    said = str(caught.value)
    assert f"{store.url}/{SMALL[0]}, 2 ranges within bytes [0, 3100): " in said
    assert "response body was cut short" in said
    assert "gave up after 4 attempts" in said  # retried as a body cut short is
    proxy.set_faults([])
    assert [len(v) for v in store.get_ranges(SMALL[0], [(0, 10), (3000, 100)])] == [10, 100]
