"""A Megatron ``.bin`` that is not the size its ``.idx`` describes, and an index of a
dtype the reader takes no tokens in (s48): the errors say which way they disagree and
what to do, not just the two numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import TokenSource
from headrace.formats._megatron import write_megatron_index


def _pair(d: Path, tokens: int, dtype: type = np.uint16) -> Path:
    np.arange(tokens, dtype=dtype).tofile(d / "m.bin")
    write_megatron_index(d / "m.idx", dtype, [40, 35, 25])
    return d / "m.bin"


@pytest.mark.parametrize("where", ["local", "file://"])
def test_a_bin_cut_short_says_so(tmp_path: Path, where: str) -> None:
    path = _pair(tmp_path, 90)
    name = str(path) if where == "local" else path.as_uri()
    with pytest.raises(FormatError, match=r"describes 200 bytes of tokens but the .bin has 180"):
        TokenSource(name, context=8)
    with pytest.raises(FormatError, match=r"20 bytes short: cut short \(an interrupted copy"):
        TokenSource(name, context=8)


def test_a_bin_longer_than_its_index_says_so(tmp_path: Path) -> None:
    path = _pair(tmp_path, 104)
    with pytest.raises(FormatError, match=r"8 bytes more than the index describes: not the \.bin"):
        TokenSource(path, context=8)


def test_an_index_of_int64_tokens_says_how_to_write_them(tmp_path: Path) -> None:
    path = _pair(tmp_path, 100, np.int64)
    with pytest.raises(FormatError, match=r"int64 is not a token type .* dtype=numpy\.int32"):
        TokenSource(path, context=8)
