"""The bench's latency proxy child (``headrace.bench._s3_serve``): its output never stalls it.

The child's stderr went to a pipe that nobody read while the run went on: once it
held 64 KiB (asyncio logging a failing connection's traceback, or a Python that says
more than usual, as ``PYTHONVERBOSE`` makes it here), the child blocked on its next
line, and with it the proxy and the bench, for good.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

import pytest

from headrace.bench._s3_serve import _proxy
from headrace.errors import StorageError


def _served(upstream: str, latency_ms: float, max_concurrent: int | None) -> list[object]:
    """What a client through the proxy got, from a thread with a bound on hanging."""
    got: list[object] = []

    def go() -> None:
        try:
            with _proxy(upstream, latency_ms, max_concurrent) as endpoint:
                try:
                    urllib.request.urlopen(endpoint + "/bucket/key", timeout=10)
                except urllib.error.HTTPError as exc:
                    got.append(exc.code)
        except BaseException as exc:  # reported to the test
            got.append(exc)
        got.append("stopped")

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(60)  # a bound on hanging, not a speed check
    assert not thread.is_alive(), "the proxy child hung on its own output"
    return got


def test_a_proxy_child_that_writes_much_to_stderr_does_not_hang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONVERBOSE", "1")  # some 200 KiB on stderr, before and after
    # Nothing listens on port 9: the proxy answers 502 itself.
    assert _served("http://127.0.0.1:9", 1.0, None) == [502, "stopped"]


def test_a_proxy_child_that_cannot_start_says_why() -> None:
    (err, stopped) = _served("ftp://127.0.0.1:9", 1.0, None)
    assert stopped == "stopped"
    assert isinstance(err, StorageError)
    assert "the latency proxy for ftp://127.0.0.1:9 did not start" in str(err)
    assert str(err).endswith(
        "did not start: Proxy upstream must be http://host:port (got 'ftp://127.0.0.1:9')."
    )
