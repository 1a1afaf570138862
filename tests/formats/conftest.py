"""Fixtures shared by the formats tests."""

from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path

import pytest

import headrace.formats._npz as npz


@pytest.fixture
def inflations(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Each deflated NPZ member's inflations (``"f0.npz: member 'x.npy'"``), the real
    inflate run."""
    got: collections.Counter[str] = collections.Counter()
    real = npz.inflate

    def counted(
        raw: memoryview, size: int, crc: int, where: str, sink: Callable[[int, bytes], None]
    ) -> None:
        got[Path(where.split(":")[0]).name + where[where.index(":") :]] += 1
        real(raw, size, crc, where, sink)

    monkeypatch.setattr(npz, "inflate", counted)
    return got
