"""LocalS3 runs moto's server through ``headrace.emulate._moto_server``: moto's module
listing taken once instead of per request, werkzeug's request lines not logged."""

from __future__ import annotations

import logging
import os

import pytest

from headrace.emulate import LocalS3
from headrace.emulate._moto_server import patch_moto


def test_local_s3_runs_the_patched_server() -> None:
    argv = list(LocalS3()._server._argv(12345))
    assert "headrace.emulate._moto_server" in argv
    assert "moto.server" not in argv
    assert argv[-4:] == ["-H", "127.0.0.1", "-p", "12345"]


def test_moto_lists_its_modules_once(monkeypatch: pytest.MonkeyPatch) -> None:
    backends = pytest.importorskip("moto.backends")
    # Restored after the test: the patch below replaces moto's function in this process.
    monkeypatch.setattr(backends, "list_of_moto_modules", backends.list_of_moto_modules)
    monkeypatch.setattr(logging.getLogger("werkzeug"), "level", logging.NOTSET)
    expected = set(backends.list_of_moto_modules())
    assert "s3" in expected

    patch_moto()

    listed = []
    real_listdir = os.listdir

    def listdir(path: str) -> list[str]:
        listed.append(path)
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    for _ in range(3):  # what the dispatcher does for each request
        assert "s3" in backends.list_of_moto_modules()
        assert "s3.us-east-1.amazonaws.com" not in backends.list_of_moto_modules()
    assert set(backends.list_of_moto_modules()) == expected
    assert listed == [], f"moto listed its folder again: {listed}"
    assert logging.getLogger("werkzeug").level == logging.WARNING


def test_a_moto_without_the_listing_is_served_unpatched(monkeypatch: pytest.MonkeyPatch) -> None:
    # A later moto that moved list_of_moto_modules: the server starts as moto's own
    # (only slower), where the patch raised AttributeError and no S3 test could start.
    backends = pytest.importorskip("moto.backends")
    monkeypatch.delattr(backends, "list_of_moto_modules")
    monkeypatch.setattr(logging.getLogger("werkzeug"), "level", logging.NOTSET)
    patch_moto()
    assert not hasattr(backends, "list_of_moto_modules")
    assert logging.getLogger("werkzeug").level == logging.WARNING
