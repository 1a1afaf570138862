"""Error paths of object-store I/O that no other test reached, on moto (S3 on 127.0.0.1).

- A listing that meets a key obstore cannot name (``d//x.bin``): in a bucket named as
  an S3 directory bucket (``...--x-s3``), which lists in one request, not in ranges
  (``ObjectStore.list_info``); and in the listing that stops past a limit
  (``ObjectStore.list_info_upto``), which a TokenSource of several shards makes, then
  opens them one by one.
- A daemon thread's request begun once the interpreter is exiting: held, then refused
  by name, a ranged read (``ObjectStore.get_range``) or a whole one (``get``), both on
  the store's loop since 2026-12-07 (a blocking try before, held in the caller's thread),
  in a child process whose exit handler waits for that thread.
- A Megatron index's document starts on S3 looked up outside the array: refused
  (``IndexError``), never read from the bytes beside it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from s3util import S3Fixture, StoreFactory
from s3util import store_options as options

from headrace.emulate import LatencyProxy
from headrace.errors import ConfigError, StorageError
from headrace.formats import FileSource, TokenSource, write_megatron_index
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

BUCKET = "headrace-error-paths"
# Named as an S3 Express One Zone directory bucket: listed in one request, not in ranges.
DIRECTORY_BUCKET = "headrace-error-paths--x-s3"
BAD = b"not readable by its name"
GOOD = np.arange(50, dtype=np.uint16).tobytes()
N = 1_000  # Megatron sequences, one document each


@dataclass
class Layout:
    local: Path  # the token shards and the Megatron pair as local files
    shards: list[str]  # the shards' URLs, beside a key obstore cannot name


@pytest.fixture(scope="module")
def layout(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Layout:
    local = tmp_path_factory.mktemp("error-paths")
    s3.server.create_bucket(BUCKET)
    client = s3.server.info.boto3_client()
    # boto3 signs for a directory bucket with a session (CreateSession) moto lacks.
    plain = s3.server.info.boto3_client(s3={"disable_s3_express_session_auth": True})
    plain.create_bucket(Bucket=DIRECTORY_BUCKET)
    for key, body in (("d//x.bin", BAD), ("d/y.bin", GOOD)):
        plain.put_object(Bucket=DIRECTORY_BUCKET, Key=key, Body=body)
        client.put_object(Bucket=BUCKET, Key=key, Body=body)
    plain.put_object(Bucket=DIRECTORY_BUCKET, Key="e/z.bin", Body=GOOD)
    shards = []
    for i in range(2):
        path = local / f"s{i}.bin"
        np.random.default_rng(i).integers(0, 60_000, 500 + 37 * i).astype(np.uint16).tofile(path)
        client.put_object(Bucket=BUCKET, Key=f"tok/{path.name}", Body=path.read_bytes())
        shards.append(f"s3://{BUCKET}/tok/{path.name}")
    client.put_object(Bucket=BUCKET, Key="tok/x//bad.bin", Body=BAD)
    lengths = (np.arange(N) % 13 + 1).astype(np.int32)
    rng = np.random.default_rng(7)
    rng.integers(0, 50_000, int(lengths.sum())).astype(np.uint16).tofile(local / "m.bin")
    write_megatron_index(local / "m.idx", np.uint16, lengths)
    for name in ("m.bin", "m.idx"):
        client.put_object(Bucket=BUCKET, Key=f"meg/{name}", Body=(local / name).read_bytes())
    client.put_object(Bucket=BUCKET, Key="exit/k.bin", Body=GOOD)
    return Layout(local=local, shards=shards)


def _unlistable(url: str) -> str:
    """What a listing of ``url`` (a prefix) says of the key ``d//x.bin`` under it."""
    return (
        rf"^{re.escape(url)}/: the listing holds 'd//x\.bin', a name obstore cannot hold "
        r"\(an empty path segment: '//', or a '/' at its start or end\), so it can neither "
        r"list past it nor read it: no prefix above it can be listed\. Move that object"
    )


# -- listings that meet a key obstore cannot name -------------------------------------


def test_a_directory_bucket_listing_one_request_names_the_key_it_cannot_hold(
    s3: S3Fixture, layout: Layout, proxy: LatencyProxy, open_store: StoreFactory
) -> None:
    # A directory bucket lists in one request (no ranges fanned out): the same error as
    # the fanned listing's, after one LIST, not retried.
    url = f"s3://{DIRECTORY_BUCKET}/d"
    store = open_store(endpoint=proxy.endpoint, url=url)
    with pytest.raises(StorageError, match=_unlistable(url)) as info:
        store.list()
    assert not isinstance(info.value, ConfigError)
    assert proxy.stats.requests == 1
    # As a FileSource of the prefix meets it.
    with pytest.raises(StorageError, match=_unlistable(url)):
        FileSource(url, format="raw", store_options=options(s3, proxy.endpoint))
    # A prefix beside it lists, in the same one request.
    assert open_store(url=f"s3://{DIRECTORY_BUCKET}/e").list() == [("z.bin", len(GOOD))]


def test_a_listing_stopped_at_a_limit_names_the_key_it_cannot_hold(
    layout: Layout, proxy: LatencyProxy, open_store: StoreFactory
) -> None:
    url = f"s3://{BUCKET}/d"
    store = open_store(endpoint=proxy.endpoint, url=url)
    with pytest.raises(StorageError, match=_unlistable(url)) as info:
        store.list_info_upto("", 100)
    assert not isinstance(info.value, ConfigError)
    assert proxy.stats.requests == 1  # one LIST, not retried


def test_token_shards_whose_folder_cannot_be_listed_open_one_by_one(
    s3: S3Fixture, layout: Layout, proxy: LatencyProxy, caplog: pytest.LogCaptureFixture
) -> None:
    # Two shards are opened from one listing of their folder; the key there obstore
    # cannot name ends it: the shards open one by one, with the same batches as the
    # local files, and the listing's error is logged (debug), not raised.
    with caplog.at_level(logging.DEBUG, logger="headrace"):
        src = TokenSource(
            layout.shards, dtype="uint16", context=8, store_options=options(s3, proxy.endpoint)
        )
    # One LIST (not retried), then each shard's head and its .idx and .json probes.
    assert proxy.stats.requests == 1 + 3 * len(layout.shards)
    said = [
        r.getMessage() for r in caplog.records if "opening its shards one by one" in r.getMessage()
    ]
    assert len(said) == 1, said
    assert said[0].startswith(f"headrace: listing s3://{BUCKET}/tok/ failed (")
    assert "the listing holds 'tok/x//bad.bin', a name obstore cannot hold" in said[0]
    local = TokenSource(
        [str(layout.local / u.rsplit("/", 1)[1]) for u in layout.shards], dtype="uint16", context=8
    )
    assert [f.num_tokens for f in src.files] == [f.num_tokens for f in local.files]
    with (
        Loader(src, batch_size=4, seed=1, steps=4) as a,
        Loader(local, batch_size=4, seed=1, steps=4) as b,
    ):
        assert batch_digest(a) == batch_digest(b)
    src.close()
    local.close()


# -- requests begun once the interpreter is exiting -------------------------------------

# A daemon thread's request, begun as the exit handler registered before headrace was
# imported (so run after headrace's own) lets it go: held for HOLD_S, then refused. The
# handler waits for the thread and prints what it met: the error, the function that
# raised it, and how long it was held.
AT_EXIT = r"""
import atexit, json, sys, threading, time, traceback

args = json.loads(sys.argv[1])
go = threading.Event()
said = {}


def request():
    go.wait()
    t0 = time.monotonic()
    try:
        if args["call"] == "get_range":
            store.get_range(args["key"], 0, 4)
        else:
            store.get(args["key"])
        said["error"] = None
    except Exception as exc:
        said["error"] = f"{type(exc).__name__}: {exc}"
        said["raised_in"] = traceback.extract_tb(exc.__traceback__)[-1].name
    said["held_s"] = time.monotonic() - t0


def last():
    go.set()
    worker.join(10)
    print(json.dumps(said), flush=True)


atexit.register(last)
from headrace.io import ObjectStore, _exit

_exit.HOLD_S = 0.3
store = ObjectStore(args["url"], **args["options"])
print(bytes(store.get(args["key"])).hex(), flush=True)  # before the exit: read
worker = threading.Thread(target=request, daemon=True)
worker.start()
"""


@pytest.mark.parametrize(
    ("call", "where", "raised_in"),
    [("get_range", "k.bin, bytes [0, 4)", "ahold"), ("get", "k.bin", "ahold")],
    ids=["ranged", "whole"],
)
def test_a_request_begun_during_the_exit_is_held_then_refused_by_name(
    s3: S3Fixture, layout: Layout, proxy: LatencyProxy, call: str, where: str, raised_in: str
) -> None:
    # Each a try on the store's loop, held there as a task. Neither reaches the server;
    # the exit goes on.
    args = {
        "url": f"s3://{BUCKET}/exit",
        "options": {**s3.options(), "endpoint": proxy.endpoint},
        "key": "k.bin",
        "call": call,
    }
    p = subprocess.run(
        [sys.executable, "-c", AT_EXIT, json.dumps(args)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=60,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    first, last = p.stdout.splitlines()
    assert bytes.fromhex(first) == GOOD
    said = json.loads(last)
    assert said["error"] == (
        f"StorageError: s3://{BUCKET}/exit/{where}: not requested: the interpreter is exiting"
    )
    assert said["raised_in"] == raised_in
    assert 0.25 <= said["held_s"] < 5  # held its HOLD_S (0.3 s) once, then refused
    assert proxy.stats.requests == 1  # the read before the exit only


# -- a Megatron index's document starts on S3 ---------------------------------------------


def test_remote_document_starts_refuse_an_entry_outside_the_array(
    s3: S3Fixture, layout: Layout, proxy: LatencyProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # positions="documents" looks starts up in blocks of the index's arrays fetched where
    # needed. An entry outside the array (-1, or its length) is an IndexError before any
    # GET: a block -1 would be the bytes before the array (the pointers'), read as
    # document entries.
    from headrace.formats import _megatron_remote
    from headrace.formats._megatron_starts import MappedStarts

    monkeypatch.setattr(_megatron_remote, "BLOCK", 8)  # many blocks in a small index
    monkeypatch.setattr(_megatron_remote, "KEEP", 2)
    src = TokenSource(
        f"s3://{BUCKET}/meg/m.bin",
        positions="documents",
        context=32,
        store_options=options(s3, proxy.endpoint),
    )
    tf = src.files[0]
    want = tf.documents(src._remote())[:-1]
    starts = tf.document_starts(src._remote(), 128)
    assert isinstance(starts, MappedStarts) and not starts.mapped
    assert len(starts) == len(want) == N
    inside = np.array([0, 5, N - 1])
    assert np.array_equal(starts.take(inside), want[inside])
    before = proxy.stats.requests
    for bad in (-1, N):
        lo, hi = min(5, bad), max(5, bad)
        with pytest.raises(
            IndexError,
            match=rf"^s3://{BUCKET}/meg/m\.idx: index entries \[{lo}, {hi}\] looked up, of {N} ",
        ):
            starts.take(np.array([5, bad]))
    assert proxy.stats.requests == before  # refused before any request
    assert np.array_equal(starts.take(inside), want[inside])  # and still looks up
    src.close()
