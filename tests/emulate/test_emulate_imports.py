"""headrace.emulate imports its proxy and S3 server (asyncio, http.client, urllib) only
when asked for them: a slowfs server starts as ``import headrace.emulate._lifeline``
(the package first), one process a mount, and paid ~140 ms for them at each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")

CHILD = """
import json, sys
import headrace.emulate, headrace.emulate._lifeline, headrace.emulate._slowfs
before = {m: m in sys.modules for m in ("asyncio", "http.client", "headrace.emulate._proxy")}
from headrace.emulate import LatencyProxy, LocalS3
import headrace.emulate._proxy as proxy, headrace.emulate._s3 as s3
print(json.dumps({"before": before, "same": [LatencyProxy is proxy.LatencyProxy,
                                             LocalS3 is s3.LocalS3]}))
"""


def test_a_slowfs_server_imports_no_proxy_and_the_proxy_is_there_when_asked_for() -> None:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert got["before"] == {
        "asyncio": False,
        "http.client": False,
        "headrace.emulate._proxy": False,
    }
    assert got["same"] == [True, True]


def test_a_missing_name_of_headrace_emulate_is_an_attribute_error() -> None:
    import headrace.emulate

    with pytest.raises(AttributeError, match=r"module 'headrace.emulate' has no attribute 'Nope'"):
        _ = headrace.emulate.Nope  # type: ignore[attr-defined]
    assert not hasattr(headrace.emulate, "Nope")
