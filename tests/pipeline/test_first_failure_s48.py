"""An error found by reading a failed chunk's steps one at a time keeps its own cause
(``raise ... from None`` dropped it: a FormatError's OSError, a transform's KeyError),
and a ``Mapped`` fn's StopIteration is named with its samples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.formats import TokenSource
from headrace.pipeline import Loader, Mapped


def _tokens(tmp_path: Path) -> TokenSource:
    path = tmp_path / "t.bin"
    np.arange(4096, dtype=np.uint16).tofile(path)
    return TokenSource(path, dtype="uint16", context=8)


def _fails(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    if (np.asarray(samples.numbers) >= 12).any():  # from step 3 on: inside a chunk
        try:
            {}["k"]
        except KeyError as exc:
            raise ValueError("a transform's own error") from exc
    return arrays


@pytest.mark.parametrize("chunk_steps", [1, 8])
def test_an_error_keeps_its_cause_whatever_the_chunk(tmp_path: Path, chunk_steps: int) -> None:
    # A source's read that fails (here a Mapped fn's): a chunk of steps is read again a
    # step at a time, to hand out those before the failing one.
    with Loader(
        Mapped(_tokens(tmp_path), _fails), batch_size=4, seed=0, chunk_steps=chunk_steps
    ) as loader:
        with pytest.raises(ValueError, match="a transform's own error") as got:
            for _ in loader:
                pass
    assert isinstance(got.value.__cause__, KeyError)


def _stops(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    next(iter([]))
    return arrays


def test_a_mapped_fn_that_raises_stop_iteration_is_named(tmp_path: Path) -> None:
    with Loader(Mapped(_tokens(tmp_path), _stops), batch_size=4, seed=0) as loader:
        with pytest.raises(RuntimeError, match=r"fn raised StopIteration on 4 sample\(s\) of seed"):
            next(iter(loader))
