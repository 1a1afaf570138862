"""A local Megatron index is checked a piece at a time and not kept: what a token file
holds, and what a worker's copy carries, does not grow with the index."""

from __future__ import annotations

import os
import pickle
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import TokenSource, _megatron, open_token_file, read_megatron_index
from headrace.formats._megatron import check_megatron_index, write_megatron_index

_LENGTHS = np.arange(1, 21, dtype=np.int32)  # 20 sequences of 1..20 tokens: 210


def _pair(tmp_path: Path, lengths: np.ndarray, docs: np.ndarray | None = None) -> Path:
    with open(tmp_path / "m.bin", "wb") as f:
        f.truncate(2 * int(lengths.sum()))  # sparse: zeros cost no blocks
    write_megatron_index(tmp_path / "m.idx", np.uint16, lengths, docs)
    return tmp_path / "m.idx"


def _poke(path: Path, at: int, fmt: str, value: int) -> None:
    raw = bytearray(path.read_bytes())
    struct.pack_into(fmt, raw, at, value)
    path.write_bytes(bytes(raw))


_SEQ, _PTR = 34, 34 + 4 * 20  # where the lengths and the pointers start
_DOC = _PTR + 8 * 20


@pytest.mark.parametrize(
    ("where", "fmt", "value", "match"),
    [
        (None, "", 0, ""),
        (_SEQ + 4 * 9, "<i", -3, "negative sequence length at 9"),
        (_PTR + 8 * 13, "<q", 7, "sequence 13 points at byte 7"),
        (_DOC + 8 * 8, "<q", 2, "corrupt document indices"),  # 7 -> 2 across a piece's edge
        (_DOC + 8 * 20, "<q", 19, "from 0 to 19"),
    ],
)
def test_checked_in_pieces_as_parsed_whole(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: int | None,
    fmt: str,
    value: int,
    match: str,
) -> None:
    monkeypatch.setattr(_megatron, "PIECE", 4)  # 20 sequences, 21 entries: 5 and 6 pieces
    idx = _pair(tmp_path, _LENGTHS)
    if where is None:
        whole = read_megatron_index(idx, 420)
        assert np.array_equal(
            check_megatron_index(idx, 420).document_bounds(), whole.document_bounds()
        )
        return
    _poke(idx, where, fmt, value)
    with pytest.raises(FormatError, match=match) as parsed:
        read_megatron_index(idx, 420)
    with pytest.raises(FormatError) as pieces:
        check_megatron_index(idx, 420)
    assert str(pieces.value) == str(parsed.value)


def test_a_token_file_holds_and_a_worker_carries_no_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 50M documents made a 1 GB index, read whole at open, held by the TokenFile and
    # pickled to each worker (954 MB a worker). Now: checked a piece at a time.
    monkeypatch.setattr(_megatron, "PIECE", 1 << 14)
    sizes = {}
    for n in (20, 200_000):
        (tmp_path / str(n)).mkdir()
        idx = _pair(tmp_path / str(n), np.full(n, 3, dtype=np.int32))
        tracemalloc.start()
        src = TokenSource(idx.with_suffix(".bin"), context=2)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 1 << 20  # the index is 2.4 MB at 200,000: pieces of 16,384 read
        sizes[n] = len(pickle.dumps(src))
        copy = pickle.loads(pickle.dumps(src))
        want = read_megatron_index(idx, 6 * n).document_bounds()
        assert np.array_equal(copy.files[0].documents(), want)
    assert sizes[200_000] - sizes[20] < 64  # the path's digits, not the index


def test_an_index_changed_since_open_is_refused_when_read_again(tmp_path: Path) -> None:
    idx = _pair(tmp_path, _LENGTHS)
    tf = open_token_file(tmp_path / "m.bin")
    write_megatron_index(idx, np.uint16, _LENGTHS[::-1].copy())  # same tokens, other bounds
    os.utime(idx, ns=(1, 1))  # another mtime even where the clock's tick is coarse
    with pytest.raises(FormatError, match=r"m\.idx: changed since it was opened"):
        tf.documents()
    os.remove(idx)
    with pytest.raises(FileNotFoundError, match=r"m\.idx"):
        tf.documents()
