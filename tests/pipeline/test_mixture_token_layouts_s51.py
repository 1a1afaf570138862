"""Token sources that do not mix are told the token way to make them mix: the same
``positions=`` for all (each adds ``position_ids``), or one dtype for all files (with a
warning that ids of two tokenizers are not one vocabulary). Until 2026-12-07 both were
told only "map one source's arrays to the other's layout with Mapped(source, fn)"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import DataError
from headrace.formats import TokenSource
from headrace.pipeline import Loader, Mixture


def first_batch(mix: Mixture) -> None:
    with Loader(mix, batch_size=8, steps=1, prefetch=0) as loader:
        next(iter(loader))


def test_positions_on_one_token_source_only(tmp_path: Path) -> None:
    np.arange(4_000, dtype=np.uint16).tofile(tmp_path / "a.bin")
    np.arange(4_000, dtype=np.uint16).tofile(tmp_path / "b.bin")
    mix = Mixture(
        {
            "web": TokenSource(tmp_path / "a.bin", context=16, dtype="uint16"),
            "owt": TokenSource(
                tmp_path / "b.bin", context=16, dtype="uint16", positions="eos", eos_id=7
            ),
        },
        [0.5, 0.5],
        batch_size=8,
    )
    with pytest.raises(DataError) as err:
        first_batch(mix)
    message = str(err.value)
    assert "only in 'owt': ['position_ids']" in message
    assert "positions=" in message and "'web'" in message.split("differ in keys")[1], message


def test_uint16_beside_uint32_token_files(tmp_path: Path) -> None:
    np.arange(4_000, dtype=np.uint16).tofile(tmp_path / "a.bin")
    np.arange(4_000, dtype=np.uint32).tofile(tmp_path / "b.bin")
    mix = Mixture(
        {
            "web": TokenSource(tmp_path / "a.bin", context=16, dtype="uint16"),
            "l3": TokenSource(tmp_path / "b.bin", context=16, dtype="uint32"),
        },
        [0.5, 0.5],
        batch_size=8,
    )
    with pytest.raises(DataError) as err:
        first_batch(mix)
    message = str(err.value)
    assert "differ in dtype" in message
    assert "astype(np.uint32)" in message and "tokenizer" in message, message
    assert "Mapped(source, fn)" in message, message
