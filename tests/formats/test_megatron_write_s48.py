"""``write_megatron_index`` refuses what it cannot write as given (s48): a sequence
length past int32 (Megatron's field) was wrapped, silently, into a negative one, and
document indices that are not a non-decreasing list from 0 to the sequence count were
written as they came: indexes every reader, this one too, refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError, FormatError
from headrace.formats import read_megatron_index, write_megatron_index


@pytest.mark.parametrize("bad", [2**31, -1])
def test_a_length_int32_cannot_hold_is_refused(tmp_path: Path, bad: int) -> None:
    lengths = np.array([5, bad, 3], dtype=np.int64)
    with pytest.raises(ConfigError, match=rf"m\.idx: sequence length {bad} at 1 .* \[0, 2\*\*31\)"):
        write_megatron_index(tmp_path / "m.idx", np.uint16, lengths)
    assert not (tmp_path / "m.idx").exists()


@pytest.mark.parametrize("docs", [[1, 3], [0, 2, 1, 3], [0, 2], []])
def test_document_indices_no_reader_takes_are_refused(tmp_path: Path, docs: list[int]) -> None:
    with pytest.raises(FormatError, match=r"m\.idx: corrupt document indices"):
        write_megatron_index(tmp_path / "m.idx", np.uint16, [5, 7, 3], np.array(docs))
    assert not (tmp_path / "m.idx").exists()


def test_empty_documents_are_written(tmp_path: Path) -> None:
    write_megatron_index(tmp_path / "m.idx", np.uint16, [5, 0, 3], np.array([0, 0, 2, 3, 3]))
    got = read_megatron_index(tmp_path / "m.idx", 16)
    assert got.document_bounds().tolist() == [0, 0, 5, 8, 8]
