"""``headrace.emulate`` imports its parts on first use: a server process (slowfs, moto)
starts as ``import headrace.emulate._lifeline`` and needs none of the others."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import headrace.emulate

SRC = Path(__file__).resolve().parents[2] / "src"


def test_a_server_process_imports_only_what_it_runs() -> None:
    code = (
        "import sys, headrace.emulate._lifeline, headrace.emulate._slowfs\n"
        "print(sorted(m for m in ('asyncio', 'http.client', 'urllib.request',"
        " 'headrace.emulate._proxy', 'headrace.emulate._s3', 'headrace.emulate._server')"
        " if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_every_public_name_resolves_and_others_do_not() -> None:
    for name in headrace.emulate.__all__:
        value = getattr(headrace.emulate, name)
        assert value.__module__.startswith("headrace.emulate._"), (name, value)
        assert name in dir(headrace.emulate)
    with pytest.raises(AttributeError, match=r"headrace\.emulate' has no attribute 'Nope'"):
        _ = headrace.emulate.Nope  # type: ignore[attr-defined]
