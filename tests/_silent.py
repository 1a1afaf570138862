"""A TCP server on 127.0.0.1 that accepts every connection and never answers: an object
store endpoint that hangs (:func:`silent_fixture`), for Ctrl-C and close() tests."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest


class Silent:
    """Accepts every connection on ``port`` and holds it, answering nothing."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted = threading.Event()
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed: the test is over
                return
            self.held.append(conn)
            self.accepted.set()

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


def silent_fixture() -> Callable[..., Any]:
    """A fixture: a :class:`Silent` server for one test. ``silent = silent_fixture()`` in
    a module."""

    @pytest.fixture
    def silent() -> Iterator[Silent]:
        s = Silent()
        try:
            yield s
        finally:
            s.close()

    return silent
