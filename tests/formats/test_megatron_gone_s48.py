"""A Megatron index deleted while a run reads its ``.bin`` (s48): its document starts,
read again when a batch first needs them, say the index was there when opened and is
gone now, as a deleted token file does, not the open's bare "no such file"."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ObjectNotFoundError
from headrace.formats import TokenSource
from headrace.formats._megatron import write_megatron_index
from headrace.io import LocalFile


def _pair(d: Path) -> Path:
    np.arange(1000, dtype=np.uint16).tofile(d / "m.bin")
    write_megatron_index(d / "m.idx", np.uint16, [300, 300, 400])
    return d / "m.bin"


@pytest.mark.parametrize("mount", ["local", "network"])
def test_a_local_index_deleted_after_open_is_said_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mount: str
) -> None:
    if mount == "network":  # read as the array, not through a map
        monkeypatch.setattr(LocalFile, "network", property(lambda _self: True))
    src = TokenSource(_pair(tmp_path), context=8, positions="documents", shuffle=False)
    os.remove(tmp_path / "m.idx")
    with pytest.raises(ObjectNotFoundError, match=r"m\.idx: no such file now; the token source"):
        src.read(0, np.arange(3))
    src.close()


def test_an_index_object_deleted_after_open_is_said_gone(tmp_path: Path) -> None:
    src = TokenSource(_pair(tmp_path).as_uri(), context=8, positions="documents", shuffle=False)
    os.remove(tmp_path / "m.idx")
    with pytest.raises(ObjectNotFoundError, match=r"m\.idx: no such object now; the token source"):
        src.read(0, np.arange(3))
    src.close()
