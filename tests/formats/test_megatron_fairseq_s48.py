"""A fairseq ``.idx`` (``fairseq-preprocess --dataset-impl mmap``) beside its ``.bin``
(s48): the same magic as Megatron-LM's, but no document count or document indices.
It was refused as a *truncated* Megatron index declaring billions of document entries
(the first two sequence lengths read as the count), which sent users to copy it again;
now it is named, and the way to read its tokens given."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import TokenSource
from headrace.formats._megatron import MEGATRON_MAGIC


def _fairseq_pair(d: Path, code: int, dtype: type, lengths: list[int]) -> Path:
    """What fairseq's ``MMapIndexedDataset.Index.writer`` writes: magic, version, dtype
    code, the sequence count, then the sizes (int32) and pointers (int64), no more."""
    sizes = np.asarray(lengths, dtype=np.int32)
    pointers = (np.cumsum(sizes, dtype=np.int64) - sizes) * np.dtype(dtype).itemsize
    with open(d / "train.idx", "wb") as f:
        f.write(MEGATRON_MAGIC + struct.pack("<QBQ", 1, code, len(sizes)))
        f.write(sizes.tobytes() + pointers.tobytes())
    np.arange(sum(lengths), dtype=dtype).tofile(d / "train.bin")
    return d / "train.bin"


@pytest.mark.parametrize(("code", "dtype"), [(8, np.uint16), (4, np.int32), (9, np.uint32)])
@pytest.mark.parametrize("where", ["local", "file://"])
def test_a_fairseq_index_is_named_and_its_tokens_read_raw(
    tmp_path: Path, code: int, dtype: type, where: str
) -> None:
    path = _fairseq_pair(tmp_path, code, dtype, [10, 7, 13])
    name = str(path) if where == "local" else path.as_uri()
    with pytest.raises(FormatError) as info:
        TokenSource(name, context=4)
    msg = str(info.value)
    assert "train.idx: a fairseq index" in msg and "truncated" not in msg
    assert f"format='raw', dtype='{np.dtype(dtype).name}'" in msg
    # As it says: the .bin is the tokens alone.
    with TokenSource(name, context=4, format="raw", dtype=dtype, shuffle=False) as src:
        assert src.read(0, np.arange(2))["x"].tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_a_megatron_index_cut_short_is_still_truncated(tmp_path: Path) -> None:
    path = _fairseq_pair(tmp_path, 8, np.uint16, [10, 7, 13])
    raw = (tmp_path / "train.idx").read_bytes()
    # A Megatron header of 3 sequences and 4 document entries, cut before its entries end.
    (tmp_path / "train.idx").write_bytes(raw[:26] + struct.pack("<Q", 4) + raw[26:])
    with pytest.raises(FormatError, match="truncated Megatron index") as info:
        TokenSource(path, context=4)
    assert "fairseq" not in str(info.value)


def test_a_fairseq_index_of_another_dtype_says_so(tmp_path: Path) -> None:
    path = _fairseq_pair(tmp_path, 5, np.int64, [10, 7, 13])
    with pytest.raises(FormatError, match=r"a fairseq index .* dtype code 5 is no token type"):
        TokenSource(path, context=4)
