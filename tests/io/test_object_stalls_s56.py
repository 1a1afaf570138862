"""Ctrl-C and close() against an object endpoint that accepts connections and never answers.

``ObjectStore.stat``, ``get_first``, ``get_range``, ``get_ranges`` and the listings ran
their request as a blocking call in the caller's thread: a loader opening an ``s3://``
source on a hung endpoint (its HEAD, its first GET) held Ctrl-C for the request's 30 s
timeout and every retry (32.5 s measured, then 5 s more at exit for the request still in
flight), and ``close()`` from another thread could not stop it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from _silent import Silent, silent_fixture
from headrace.errors import StorageError
from headrace.io import ObjectStore, RetryPolicy

SRC = str(Path(__file__).resolve().parents[2] / "src")
silent = silent_fixture()


CALLS: dict[str, Callable[[ObjectStore], Any]] = {
    "stat": lambda s: s.stat("data.bin"),
    "get_first": lambda s: s.get_first("data.bin", 100),
    "get_range": lambda s: s.get_range("data.bin", 10, 100),
    "get_ranges": lambda s: s.get_ranges("data.bin", [(0, 10), (100, 10)]),
    "list_info_upto": lambda s: s.list_info_upto("d/", 10),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_close_stops_a_blocking_read_stalled_in_flight(silent: Silent, call: str) -> None:
    # A timeout past the hang guard: a call that only the timeout ends fails the test.
    store = ObjectStore(
        "s3://bucket",
        endpoint=f"http://127.0.0.1:{silent.port}",
        access_key_id="test",
        secret_access_key="test",
        region="us-east-1",
        retry=RetryPolicy(timeout_s=120.0, attempts=1),
    )
    got: list[BaseException | object] = []

    def work() -> None:
        try:
            got.append(CALLS[call](store))
        except BaseException as exc:
            got.append(exc)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    assert silent.accepted.wait(30), "the store never connected"
    time.sleep(0.3)  # the request sent, waiting for an answer that never comes
    store.close()
    t.join(20)  # a hang guard, not a timing
    assert not t.is_alive(), f"{call} went on after close()"
    (err,) = got
    assert isinstance(err, StorageError), repr(err)
    assert "closed" in str(err) and "s3://bucket" in str(err)


CHILD = """
import sys
from headrace.formats import TokenSource
from headrace.pipeline import Loader
opts = {"endpoint": sys.argv[1], "access_key_id": "test", "secret_access_key": "test",
        "region": "us-east-1"}
print("opening", flush=True)
with Loader(TokenSource("s3://bucket/train.bin", dtype="uint16", context=64,
                        store_options=opts), batch_size=4, seed=1) as loader:
    for batch in loader:
        pass
"""


@pytest.mark.integration
def test_ctrl_c_stops_a_loader_opening_tokens_on_an_endpoint_that_never_answers(
    silent: Silent,
) -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, f"http://127.0.0.1:{silent.port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert silent.accepted.wait(60), "the loader never connected"
        time.sleep(0.5)  # its HEAD sent, waiting for an answer that never comes
        proc.send_signal(signal.SIGINT)
        # A hang guard, not a timing: it took 32.5 s (the HEAD's 30 s timeout, then more).
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -signal.SIGINT, err
    assert err.rstrip().splitlines()[-1] == "KeyboardInterrupt", err
    assert "still in flight" not in err  # nothing abandoned at exit


@pytest.mark.integration
def test_ctrl_c_in_a_stalled_object_probe_does_not_say_unmount(tmp_path: Path) -> None:
    # The probe checks each round's GETs with get_ranges: a blocking call, which the
    # store's close() on Ctrl-C could not stop, so the probe ended with "1 call(s) still
    # wait on storage (s3://...): ... unmount it (fusermount3 -u MNT ...)": no mount there.
    pytest.importorskip("moto")
    from headrace.emulate import LatencyProxy, LocalS3
    from headrace.emulate._proxy import FaultRule

    with LocalS3() as s3:
        s3.create_bucket("bucket")
        s3.info.boto3_client().put_object(Bucket="bucket", Key="o.bin", Body=os.urandom(1 << 20))
        # The 9th GET: the first of get_ranges' 8 after get_many's 8 (4 KiB, 1 in flight).
        stall = FaultRule(kind="stall", match="GET /bucket/o.bin", every=9, limit=1, stall_s=120)
        with LatencyProxy(s3.endpoint, faults=[stall]) as proxy:
            where = ["--endpoint", proxy.endpoint, "--region", "us-east-1"]
            env = {
                **os.environ,
                "PYTHONPATH": SRC,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
            }
            proc = subprocess.Popen(
                [sys.executable, "-m", "headrace.cli", "probe", "s3://bucket/o.bin", *where],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            try:
                deadline = time.monotonic() + 60
                while proxy.stats.faults == 0 and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert proxy.stats.faults == 1, "the stall never fired"
                time.sleep(1.5)  # past the 1 s a call must wait to be named
                proc.send_signal(signal.SIGINT)
                _, err = proc.communicate(timeout=30)  # a hang guard
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
    assert proc.returncode == 130, err
    assert "unmount" not in err and "still wait on storage" not in err, err
    assert "still in flight" not in err, err  # nothing abandoned at exit
