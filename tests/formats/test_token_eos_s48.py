"""``positions="eos"`` with a negative ``eos_id``: refused, whatever the dtype.

A uint16 or uint32 source refused it (outside the dtype), but an int32 one without
``vocab_size`` took it: no tokenizer gives an end-of-text id below 0 (``-1`` and ``-100``
are configs' "none" and the loss's ignore index), so no document ever ended and every
row's positions ran 0, 1, 2, ... as one document, silently.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.formats import TokenSource


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "t.bin"
    np.array([1, 2, 9, 3, 4, 9, 5, 6, 7, 8, 9, 1] * 4, dtype=np.int32).tofile(path)
    return path


@pytest.mark.parametrize("eos", [-1, -100, np.int32(-1)])
def test_a_negative_eos_id_is_refused(tmp_path: Path, eos: int) -> None:
    with pytest.raises(ConfigError, match=rf"eos_id={int(eos)} is negative"):
        TokenSource(_file(tmp_path), dtype="int32", context=4, positions="eos", eos_id=eos)


def test_an_eos_id_of_the_tokens_marks_documents(tmp_path: Path) -> None:
    src = TokenSource(
        _file(tmp_path), dtype="int32", context=4, shuffle=False, positions="eos", eos_id=9
    )
    assert src.read(0, np.arange(1))["position_ids"].tolist() == [[0, 1, 2, 0]]
    src.close()
