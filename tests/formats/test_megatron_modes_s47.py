"""A multimodal Megatron-LM index (``IndexedDataset(..., multimodal=True)``) ends with
one int8 mode a sequence after its document indices: refused, as before, but saying
so, not just "trailing bytes"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import TokenSource
from headrace.formats._megatron import write_megatron_index


@pytest.mark.parametrize("where", ["local", "file://"])
def test_a_multimodal_index_is_named_as_one(tmp_path: Path, where: str) -> None:
    path = tmp_path / "mm_text_document.bin"
    np.arange(100, dtype=np.uint16).tofile(path)
    idx = tmp_path / "mm_text_document.idx"
    write_megatron_index(idx, np.uint16, [40, 35, 25])
    with open(idx, "ab") as f:
        f.write(np.array([0, 1, 0], dtype=np.int8).tobytes())  # text, image, text
    name = str(path) if where == "local" else path.as_uri()
    with pytest.raises(FormatError) as info:
        TokenSource(name, context=8)
    msg = str(info.value)
    assert "mm_text_document.idx" in msg and "3 bytes" in msg
    assert "multimodal" in msg and "sequence modes" in msg


def test_other_trailing_bytes_are_not_called_modes(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    np.arange(100, dtype=np.uint16).tofile(path)
    write_megatron_index(tmp_path / "t.idx", np.uint16, [40, 35, 25])
    with open(tmp_path / "t.idx", "ab") as f:
        f.write(b"\0" * 5)
    with pytest.raises(FormatError, match="trailing bytes") as info:
        TokenSource(path, context=8)
    assert "multimodal" not in str(info.value)
