"""close(), the ``with`` block's end and Ctrl-C on a loader whose object store stalls mid-run.

The read-ahead thread, stuck in a GET that never answers, outlived the stop's 1 s wait,
and close() warned "gave up on the read-ahead thread ... (stalled storage?)" and left it
behind, although closing the source's stores (which close() did next) cancels that GET
at once and the thread ends a moment later. moto serves the bytes behind headrace's
proxy, which from some point on stalls every GET (the only fault injected).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.integration

SRC = str(Path(__file__).resolve().parents[2] / "src")

CHILD = r"""
import json, sys, threading, warnings
from headrace.formats import FileSource, TokenSource
from headrace.io import RetryPolicy
from headrace.pipeline import Loader

kind, endpoint, mode = sys.argv[1:4]
opts = {"endpoint": endpoint, "access_key_id": "testing", "secret_access_key": "testing",
        "region": "us-east-1", "retry": RetryPolicy(timeout_s=120.0)}
if kind == "tokens":
    source = TokenSource("s3://bucket/train.bin", dtype="uint16", context=64,
                         window_bytes=64 << 10, block_bytes=16 << 10, store_options=opts)
else:
    source = FileSource("s3://bucket/files/", format="raw", in_flight=2, store_options=opts)
loader = Loader(source, batch_size=4, seed=1)

def ours():
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("headrace"))

def read():
    for i, _ in enumerate(loader):
        if i == 2:
            print("go", flush=True)

if mode == "close":
    said = []
    def consume():
        try:
            read()
        except Exception as exc:
            said.append(type(exc).__name__)
    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    sys.stdin.readline()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader.close()
    alive = ours()  # as close() returns
    consumer.join(20)
    print(json.dumps({"warnings": [str(w.message) for w in caught], "alive": alive,
                      "consumer": consumer.is_alive(), "said": said}), flush=True)
else:
    try:
        with loader:
            read()
    except KeyboardInterrupt:
        print(json.dumps({"alive": ours()}), flush=True)
        raise
"""


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    pytest.importorskip("moto")
    from headrace.emulate import LocalS3

    with LocalS3() as s3:
        s3.create_bucket("bucket")
        client = s3.info.boto3_client()
        rng = np.random.default_rng(0)
        tokens = rng.integers(0, 50_000, 1 << 20, dtype=np.uint16)  # 2 MiB: 32 windows
        client.put_object(Bucket="bucket", Key="train.bin", Body=tokens.tobytes())
        for i in range(64):
            client.put_object(Bucket="bucket", Key=f"files/{i:03d}.bin", Body=os.urandom(4096))
        yield s3


def _stalled_run(s3: Any, kind: str, mode: str) -> tuple[dict[str, Any], str, int]:
    """Run the child through its first batches, stall every GET, then close it (``mode``
    "close": from its main thread while another iterates; "sigint": Ctrl-C)."""
    from headrace.emulate import LatencyProxy
    from headrace.emulate._proxy import FaultRule

    with LatencyProxy(s3.endpoint) as proxy:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, kind, proxy.endpoint, mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": SRC},
        )
        try:
            assert proc.stdout is not None and proc.stdin is not None
            line = proc.stdout.readline()
            assert line == "go\n", proc.communicate(timeout=30)
            proxy.set_faults([FaultRule(kind="stall", match="GET /bucket/", stall_s=300)])
            deadline = time.monotonic() + 60
            while proxy.stats.faults == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert proxy.stats.faults > 0, "no GET met the stall"
            time.sleep(0.5)  # the read-ahead thread waits inside the stalled GET
            if mode == "close":
                proc.stdin.write("close\n")
                proc.stdin.flush()
            else:
                proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)  # a hang guard, not a timing
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return json.loads(out.splitlines()[-1]), err, proc.returncode


@pytest.mark.parametrize("kind", ["tokens", "files"])
def test_close_on_a_stalled_store_ends_the_read_ahead_quietly(s3: Any, kind: str) -> None:
    got, err, rc = _stalled_run(s3, kind, "close")
    assert rc == 0, err
    assert got["warnings"] == [], got  # was: "gave up on the read-ahead thread ..."
    assert got["alive"] == [], got  # was: headrace-prefetch, still in the GET
    assert not got["consumer"] and got["said"] == ["StateError"], got  # the iterator: closed


@pytest.mark.parametrize("kind", ["tokens", "files"])
def test_ctrl_c_on_a_stalled_store_leaves_no_thread_and_no_warning(s3: Any, kind: str) -> None:
    got, err, rc = _stalled_run(s3, kind, "sigint")
    assert rc == -signal.SIGINT, err
    assert err.rstrip().splitlines()[-1] == "KeyboardInterrupt", err
    assert "gave up" not in err, err
    assert "still in flight" not in err, err  # nothing abandoned at exit
    assert got["alive"] == [], got
