"""A training process whose S3 endpoint stops answering ends promptly on Ctrl-C or an error.

The proxy stalls every GET (120 s) once the run is under way. Before, the
read-ahead's failed read (its GETs cancelled by the close) was read again a
step at a time after the close, on a reopened store, each GET stalling 30 s a
try: the process had not ended 60 s after a Ctrl-C.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
from _stalled_child import go_on, ready_child, timed_exit, wait_for_stalled_get, write_script
from s3util import BUCKET, S3Fixture

from headrace.emulate import FaultRule, LatencyProxy

pytestmark = pytest.mark.integration

# Small windows: the run needs a new window's GETs every few steps.
_SOURCE = """
src = TokenSource(sys.argv[2], dtype="uint32", context=256, window_bytes=1 << 16,
                  block_bytes=1 << 14, store_options=json.loads(sys.argv[3]))
"""


@pytest.mark.parametrize("how", ["ctrl-c", "error"])
def test_a_process_whose_s3_endpoint_stalls_exits_promptly(
    s3: S3Fixture, proxy: LatencyProxy, tmp_path: Path, how: str
) -> None:
    body = np.random.default_rng(1).integers(0, 2**31, 1 << 22, dtype=np.uint32).tobytes()
    s3.server.info.boto3_client().put_object(Bucket=BUCKET, Key="stall-exit/t.bin", Body=body)
    options = {**s3.options(), "endpoint": proxy.endpoint}
    script = write_script(tmp_path / "train.py", _SOURCE)
    url = f"s3://{BUCKET}/stall-exit/t.bin"
    with ready_child([sys.executable, str(script), how, url, json.dumps(options)]) as p:
        try:
            proxy.set_faults([FaultRule(kind="stall", stall_s=120, match="GET ")])
            go_on(p)
            wait_for_stalled_get(proxy)
            took = timed_exit(p, signal.SIGINT if how == "ctrl-c" else None)
            rc = p.wait(timeout=30)
            err = p.stderr.read() if p.stderr else ""
        finally:
            proxy.set_faults([])
    # About a second (measured 1.1 s after Ctrl-C, 0.7 s after the error); before, not
    # within 60 s. The bound is a margin for a loaded machine.
    assert took < 10, (took, err)
    assert rc == (-signal.SIGINT if how == "ctrl-c" else 3), (rc, err)
