"""Fixtures shared by the pipeline tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def once_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The once battery's datasets (tests/_once_data.py), built once a test process for
    both of its files."""
    from _once_data import build

    d = tmp_path_factory.mktemp("once")
    build(d)
    return d
