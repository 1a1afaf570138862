"""``positions="eos"`` with an ``eos_id`` outside ``vocab_size``: refused by
:func:`check_positions`, not left to mark no document anywhere.

With ``vocab_size=`` every id delivered lies in ``[0, vocab_size)``, so an ``eos_id`` at
or past it never matches: every row's positions ran 0, 1, 2, ... as one document,
silently (``eos_id=vocab_size``, an off-by-one, or another tokenizer's end-of-text id).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.formats import open_token_file
from headrace.formats._token_checks import check_positions


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.bin"
    np.array([1, 2, 9, 3, 4, 9, 5, 6, 7, 8, 9, 1], dtype=np.uint16).tofile(path)
    return path


@pytest.mark.parametrize("eos", [10, 11, np.uint16(10), 65535])
def test_an_eos_id_outside_the_vocabulary_is_refused(tmp_path: Path, eos: int) -> None:
    f = open_token_file(_file(tmp_path), "uint16")
    with pytest.raises(
        ConfigError, match=rf"eos_id={int(eos)} is outside the vocabulary \[0, 10\)"
    ):
        check_positions("eos", eos, f.dtype, [f], vocab=10)


@pytest.mark.parametrize("vocab", [None, 10, 2**40])
def test_an_eos_id_inside_the_vocabulary_passes(tmp_path: Path, vocab: int | None) -> None:
    f = open_token_file(_file(tmp_path), "uint16")
    check_positions("eos", 9, f.dtype, [f], vocab=vocab)
    check_positions("eos", np.int64(0), f.dtype, [f], vocab=vocab)


def test_a_token_source_refuses_an_eos_id_outside_its_vocabulary(tmp_path: Path) -> None:
    # Every id delivered lies in [0, vocab_size): eos_id=10 would never end a document.
    from headrace.formats import TokenSource

    path = tmp_path / "t.bin"
    np.arange(64, dtype=np.uint16).__mod__(10).astype(np.uint16).tofile(path)
    with pytest.raises(ConfigError, match=r"eos_id=10 is outside the vocabulary \[0, 10\)"):
        TokenSource(path, dtype="uint16", context=4, vocab_size=10, positions="eos", eos_id=10)


def test_a_file_listed_as_a_path_and_as_its_url_is_listed_twice(tmp_path: Path) -> None:
    # Compared by their strings, the two were two files: read twice an epoch, silently.
    from headrace.formats import TokenSource

    path = tmp_path / "t.bin"
    np.arange(256, dtype=np.uint16).tofile(path)
    for pair in ([path, path.as_uri()], [path.as_uri(), f"file://{tmp_path}/./t.bin"]):
        with pytest.raises(ConfigError, match="listed twice"):
            TokenSource(pair, dtype="uint16", context=4)
