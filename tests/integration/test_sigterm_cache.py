"""A run filling ``cache_dir`` ended by SIGTERM (what torchrun, Slurm and Kubernetes send)
or SIGKILL (preemption), on a real S3 endpoint (moto): the process ends promptly even
with its reads stuck in a stalled store, and the rerun over the same cache gives the
bytes of a run that was never stopped, leaving no writer's temporary behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _stalled_child import go_on, ready_child, wait_for_stalled_get
from s3util import BUCKET, S3Fixture

from headrace.emulate import FaultRule, LatencyProxy
from headrace.io import _cache_files as cache_files

pytestmark = pytest.mark.integration

# Prints "ready" at step 3 (then, with "wait", waits for a line on stdin), and the run's
# digest at its end. "handler": SIGTERM raises SystemExit, as training frameworks set it.
_SCRIPT = """
import json, signal, sys
url, options, cache, how, prefetch, wait = sys.argv[1:]
if how == "handler":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
from headrace.formats import TokenSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest
src = TokenSource(url, dtype="uint32", context=256, window_bytes=1 << 16, block_bytes=1 << 14,
                  store_options=json.loads(options), cache_dir=cache)
with Loader(src, batch_size=8, chunk_steps=4, steps=200, seed=3, prefetch=int(prefetch)) as ld:
    def steps():
        for i, batch in enumerate(ld):
            if i == 3:
                print("ready", flush=True)
                if wait == "wait":
                    sys.stdin.readline()
            yield batch
    print(batch_digest(steps()), flush=True)
"""


@pytest.fixture(scope="module")
def command(
    s3: S3Fixture, _session_proxy: LatencyProxy, tmp_path_factory: pytest.TempPathFactory
) -> list[str]:
    """The script's command line but for its last four arguments (cache, how, prefetch,
    wait), over an 8 MiB object of its own through the proxy."""
    body = np.random.default_rng(1).integers(0, 2**31, 1 << 21, dtype=np.uint32).tobytes()
    s3.server.info.boto3_client().put_object(Bucket=BUCKET, Key="sigterm/t.bin", Body=body)
    script = tmp_path_factory.mktemp("sigterm") / "train.py"
    script.write_text(_SCRIPT)
    options = json.dumps({**s3.options(), "endpoint": _session_proxy.endpoint})
    return [sys.executable, str(script), f"s3://{BUCKET}/sigterm/t.bin", options]


@pytest.fixture(scope="module")
def clean(
    command: list[str], _session_proxy: LatencyProxy, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """The digest of a run never stopped, over a cache of its own: the same for every
    test here (one object, one script), so run once."""
    _session_proxy.set_faults([])
    return finish(command, str(tmp_path_factory.mktemp("fresh")))


@pytest.fixture
def train(command: list[str], proxy: LatencyProxy, tmp_path: Path) -> list[str]:
    """The script's command line, with a cache of this test's, but for its last three
    arguments (how, prefetch, wait)."""
    return [*command, str(tmp_path / "cache")]


def finish(train: list[str], cache: str) -> str:
    """The digest of a whole run over ``cache``."""
    argv = [*train[:4], cache, "default", "8", "go"]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()[-1]


def temporaries(cache: str) -> list[str]:
    return [path for path, st, kind in cache_files.scan(cache) if kind == "tmp"]


def restarted_later(cache: str) -> None:
    """Age a killed run's temporaries (if a kill met a write) by a minute: the restart
    comes that long after (younger than DEAD_TMP_S, one is not taken for dead)."""
    for path in temporaries(cache):
        t = time.time() - 60
        os.utime(path, (t, t))


@pytest.mark.parametrize("prefetch", [0, 8])
@pytest.mark.parametrize("how", ["default", "handler"])
def test_sigterm_while_the_store_stalls_ends_promptly_and_the_rerun_is_the_same(
    train: list[str], proxy: LatencyProxy, clean: str, how: str, prefetch: int
) -> None:
    with ready_child([*train, how, str(prefetch), "wait"]) as p:
        try:
            proxy.set_faults([FaultRule(kind="stall", stall_s=120, match="GET ")])
            go_on(p)
            wait_for_stalled_get(proxy)
            t0 = time.monotonic()
            p.send_signal(signal.SIGTERM)
            rc = p.wait(timeout=60)
            took = time.monotonic() - t0
            err = p.stderr.read() if p.stderr else ""
        finally:
            proxy.set_faults([])
    # Measured 0.01 s (no handler: the kernel ends it), 0.16 s (handler, prefetch 0) and
    # 1.2 s (handler, prefetch 8: close() gives the stuck read-ahead 1 s). The bound is a
    # margin for a loaded machine.
    assert took < 10, (took, err)
    assert rc == (-signal.SIGTERM if how == "default" else 143), (rc, err)
    cache = train[-1]
    restarted_later(cache)
    assert finish(train, cache) == clean
    assert temporaries(cache) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_run_killed_while_it_fills_the_cache_reruns_to_the_same_bytes(
    train: list[str], clean: str, sig: int
) -> None:
    cache = train[-1]
    rng = np.random.default_rng(0)
    for _ in range(3):  # each kill lands elsewhere in the fill; each rerun fills on
        with subprocess.Popen(
            [*train, "default", "8", "go"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        ) as p:
            assert p.stdout is not None and p.stdout.readline() == b"ready\n"
            time.sleep(float(rng.uniform(0.0, 0.3)))
            p.send_signal(sig)
            assert p.wait(timeout=30) == -sig
    # A kill leaves no torn entry (each is renamed into place whole); a writer killed
    # mid-entry leaves its temporary, which the next run's first write removes once its
    # lock is free (tests/integration/test_object_cache_faults.py stops one there).
    restarted_later(cache)
    assert finish(train, cache) == clean
    assert temporaries(cache) == []
