"""A Megatron-LM user's pairs as their own converter writes them (s55): the index's
header, sizes, pointers and document indices packed by hand, as Megatron-LM's
``indexed_dataset.py`` lays them out, and the bad inputs such a user meets.

A dtype code that disagrees with the tokens (a converter's table that maps uint16 to
code 4) was refused as a corrupt pointer ("sequence 1 points at byte 28, expected 56"),
or, for an index of one sequence, as a ``.bin`` cut short, "copy it again": the copy
was good, the code was not, and neither message said so. A ``.bin`` whose ``.idx`` is
missing, read with ``positions="documents"``, asked for a dtype, which given, was
refused a second time for having no index."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _megatron_pairs import read_pair, write_pair
from headrace.errors import DataError, FormatError
from headrace.formats import TokenSource
from headrace.formats._megatron import check_megatron_index, parse_megatron_index
from headrace.pipeline import Loader


def _docs(seed: int, lengths: list[int]) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.integers(1, 50_000, n)] for n in lengths]


@pytest.mark.parametrize("lengths", [[10, 7, 13, 5], [40]], ids=["pointers", "one-sequence"])
@pytest.mark.parametrize(("dtype", "code", "says"), [(np.uint16, 4, 8), (np.int32, 8, 4)])
def test_a_dtype_code_that_disagrees_with_the_tokens_is_named(
    tmp_path: Path, lengths: list[int], dtype: type, code: int, says: int
) -> None:
    path = write_pair(tmp_path / "web", _docs(1, lengths), dtype, code=code)
    idx = path.with_suffix(".idx")
    wrote, read = np.dtype(dtype), {8: "uint16", 4: "int32"}[code]
    for opened in (
        lambda: TokenSource(path, context=4),
        lambda: check_megatron_index(idx, path.stat().st_size),
        lambda: parse_megatron_index(str(idx), idx.read_bytes(), path.stat().st_size),
    ):
        with pytest.raises(FormatError) as info:
            opened()
        msg = str(info.value)
        assert str(idx) in msg and f"dtype code {code} ({read})" in msg, msg
        assert f"{wrote.itemsize}-byte tokens" in msg and f"dtype code {says}" in msg, msg
        assert "cut short" not in msg, msg


def test_a_bin_cut_short_is_still_said_so(tmp_path: Path) -> None:
    """The dtype code is named only where the ``.bin`` holds the lengths' tokens in the
    other dtype exactly; a ``.bin`` cut anywhere else is said to be cut short."""
    path = write_pair(tmp_path / "web", _docs(2, [40]), np.uint16)
    with open(path, "r+b") as f:
        f.truncate(40)
    with pytest.raises(FormatError, match="40 bytes short: cut short") as info:
        TokenSource(path, context=4)
    assert "dtype code" not in str(info.value)


def test_a_bin_without_its_idx_read_for_documents_names_the_index(tmp_path: Path) -> None:
    path = write_pair(tmp_path / "web", _docs(3, [10, 7, 13]), np.uint16)
    idx = path.with_suffix(".idx")
    idx.unlink()
    with pytest.raises(DataError) as info:
        TokenSource(path, context=4, positions="documents")
    msg = str(info.value)
    assert f"no Megatron index at {idx}" in msg and "positions='documents'" in msg, msg
    assert "needs a dtype" not in msg, msg
    # Without positions the file may be raw tokens: a dtype is what is asked for; so it
    # is where raw tokens are asked for.
    with pytest.raises(Exception, match="needs a dtype"):
        TokenSource(path, context=4)
    write_pair(tmp_path / "web", _docs(3, [10, 7, 13]), np.uint16)
    with pytest.raises(Exception, match="needs a dtype"):
        TokenSource(path, context=4, format="raw", positions="documents")


def test_documents_of_sentences_empty_and_longer_than_the_context(tmp_path: Path) -> None:
    """Every sample and its ``position_ids`` as NumPy reads the pair: documents of two
    sequences (``--split-sentences``), empty ones (no sequence, or an empty one) at the
    start, middle and end, and documents several contexts long."""
    rng = np.random.default_rng(4)

    def seqs(*ns: int) -> list[np.ndarray]:
        return [rng.integers(1, 50_000, n) for n in ns]

    docs = [[], seqs(0), seqs(37), seqs(3, 5), [], seqs(0, 0), seqs(2), seqs(21, 9), seqs(0)]
    path = write_pair(tmp_path / "web", docs, np.uint16)
    tokens, bounds = read_pair(path)
    L = 4
    src = TokenSource(path, context=L, positions="documents")
    n = src.samples_per_epoch
    assert n == (len(tokens) - 1) // L
    with Loader(src, batch_size=n, seed=5, steps=1) as loader:
        batch = next(iter(loader))
    starts = []
    for x, y, pos in zip(batch["x"], batch["y"], batch["position_ids"], strict=True):
        (s,) = [s for s in range(0, n * L, L) if np.array_equal(tokens[s : s + L], x)]
        assert np.array_equal(tokens[s + 1 : s + L + 1], y)
        at = np.arange(s, s + L)
        in_doc = at - bounds[np.searchsorted(bounds, at, side="right") - 1]
        assert np.array_equal(pos, np.minimum(in_doc, np.arange(L)))
        starts.append(s)
    assert sorted(starts) == list(range(0, n * L, L))


@pytest.mark.parametrize(
    ("version", "code", "says"),
    [
        (2, None, ["version 2", "Megatron-LM writes version 1", "write the .bin and .idx pair"]),
        (1, 9, ["dtype code 9", "fairseq's table", "format='raw', dtype='uint32'"]),
        (1, 0, ["dtype code 0", "1..8", "write the .bin and .idx pair"]),
    ],
)
def test_a_header_refused_says_what_to_do(
    tmp_path: Path, version: int, code: int | None, says: list[str]
) -> None:
    path = write_pair(tmp_path / "web", _docs(6, [10, 7]), np.uint16, code=code, version=version)
    with pytest.raises(FormatError) as info:
        TokenSource(path, context=4)
    msg = str(info.value)
    assert str(path.with_suffix(".idx")) in msg and all(s in msg for s in says), msg
