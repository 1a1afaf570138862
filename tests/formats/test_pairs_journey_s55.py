"""Pairs and padded rows as a retrieval/SFT user writes them (s55): ``np.savez`` archives.

A user whose tokenizer script ends in ``np.savez("pairs.npz", query=..., pos=...)`` hands
that archive to ``PairRows`` or ``PaddedRows``. Row files are ``.npy`` or raw; an NPZ
was opened as raw, and the message asked for a sidecar, with which the zip's bytes (its
headers, the NPY headers inside) were read as token ids without a word.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import DataError, FormatError
from headrace.formats import PaddedRows, PairRows, write_row_file
from headrace.pipeline import Loader


def archive(root: Path, compressed: bool = False) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(55)
    arrays = {
        "query": rng.integers(1, 30_000, (40, 8)).astype(np.uint16),
        "pos": rng.integers(1, 30_000, (40, 16)).astype(np.uint16),
    }
    path = root / "pairs.npz"
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    return path, arrays


@pytest.mark.parametrize("compressed", [False, True])
def test_an_npz_archive_given_as_a_row_file_says_how_to_save_its_arrays(
    tmp_path: Path, compressed: bool
) -> None:
    path, _ = archive(tmp_path, compressed)
    with pytest.raises(FormatError) as err:
        PairRows({"query": str(path), "pos": str(path)})
    msg = str(err.value)
    assert str(path) in msg and "NPZ archive" in msg
    assert "np.save" in msg and ".npy" in msg
    # Until 2026-12-07: "a raw row file needs a dtype and a width ... write pairs.npz.json".
    assert "pairs.npz.json" not in msg


def test_an_npz_archive_with_a_sidecar_is_not_read_as_tokens(tmp_path: Path) -> None:
    path, arrays = archive(tmp_path)
    # What the old message asked for: uint8 rows of 1 divide any size, and one row as
    # wide as the file does too.
    Path(f"{path}.json").write_text(json.dumps({"dtype": "uint8", "width": 1}))
    with pytest.raises(FormatError, match="NPZ archive"):
        PairRows({"query": str(path), "pos": str(path)})
    size = path.stat().st_size
    Path(f"{path}.json").write_text(json.dumps({"dtype": "uint8", "width": size}))
    with pytest.raises(FormatError, match="NPZ archive"):
        PaddedRows(str(path), context=size - 1)
    # Its arrays saved as the message says read back exactly.
    for name, a in arrays.items():
        np.save(tmp_path / f"{name}.npy", a)
    src = PairRows({n: str(tmp_path / f"{n}.npy") for n in arrays}, shuffle=False)
    with Loader(src, batch_size=40, seed=0) as loader:
        batch = next(iter(loader))
    for name, a in arrays.items():
        assert batch[f"{name}_x"].tobytes() == a.tobytes()


def test_raw_rows_that_begin_with_the_zip_magic_still_read(tmp_path: Path) -> None:
    # uint8 ids 80, 75, 3, 4 are b"PK\x03\x04": raw rows, not an archive, as written.
    rows = np.tile(np.array([[80, 75, 3, 4, 9, 9, 0, 0]], np.uint8), (6, 1))
    write_row_file(tmp_path / "t.bin", rows)
    src = PaddedRows(str(tmp_path / "t.bin"), context=7, shuffle=False)
    with Loader(src, batch_size=6, seed=0) as loader:
        batch = next(iter(loader))
    assert (batch["x"] == rows[:, :7]).all()


def qwen_style(root: Path) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """Rows of a tokenizer whose id 0 is a real token ("!" in GPT-2's and Qwen's),
    right-padded with np.zeros as a user's script does: 0 is padding and "!" alike."""
    rng = np.random.default_rng(550)
    out, paths = {}, {}
    for name, w in (("query", 12), ("pos", 20)):
        tok = np.zeros((30, w), np.uint32)
        for i, n in enumerate(rng.integers(3, w + 1, 30)):
            tok[i, :n] = rng.integers(1, 150_000, n)
        out[name] = tok
    out["query"][7, 1] = 0  # "Hi! ..." : a real 0 inside row 7's content
    for name, tok in out.items():
        np.save(root / f"{name}.npy", tok)
        paths[name] = str(root / f"{name}.npy")
    return paths, out


def test_a_pad_id_inside_a_rows_content_is_named_not_masked_silently(tmp_path: Path) -> None:
    paths, _ = qwen_style(tmp_path)
    src = PairRows(paths, shuffle=False)
    # Until 2026-12-07 row 7's "!" came out with query_mask False: left out of attention
    # and pooling without a word.
    with pytest.raises(DataError) as err:
        src.read(0, np.arange(30))
    msg = str(err.value)
    assert paths["query"] in msg and "row 7" in msg and "member 'query'" in msg
    assert "position 1" in msg and "pad_id=0" in msg and "mask file" in msg


def test_rows_padded_on_either_side_and_their_mask_files_still_read(tmp_path: Path) -> None:
    paths, arrays = qwen_style(tmp_path)
    for name, tok in arrays.items():  # the tokenizer's attention_mask, "!" included
        mask = np.zeros(tok.shape, np.uint8)
        for i, row in enumerate(tok):
            mask[i, : int(np.flatnonzero(row)[-1]) + 1] = 1
        np.save(tmp_path / f"{name}_mask.npy", mask)
    masked = {n: (p, str(tmp_path / f"{n}_mask.npy")) for n, p in paths.items()}
    batch = PairRows(masked, shuffle=False).read(0, np.arange(30))
    assert batch["query_mask"][7, :2].all()  # the "!" is attended
    # Left-padded rows without a mask file: padding on one side is no hole.
    left = arrays["pos"][:, ::-1].copy()
    np.save(tmp_path / "left.npy", left)
    batch = PairRows({"pos": str(tmp_path / "left.npy")}, shuffle=False).read(0, np.arange(30))
    assert (batch["pos_mask"] == (left != 0)).all()
