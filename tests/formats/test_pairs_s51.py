"""Contrastive files as an E5-style user writes them (s51): what a mistake in them says.

A query/positive/negatives dataset is written per role, by hand: ``tofile`` and a
sidecar typed in, ``np.save`` of a tokenizer's output. Each mistake such a user makes
must be named with the file, the member, what was found and what to do.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import DataError, FormatError
from headrace.formats import PaddedRows, PairRows

N, K = 60, 3
WIDTHS = {"query": 8, "pos": 24}


def written(root: Path) -> dict[str, np.ndarray]:
    """Right-padded ids per role (uint16; 1 to width real tokens a row)."""
    rng = np.random.default_rng(51)
    out = {}
    for role, w in WIDTHS.items():
        tok = rng.integers(1, 30_000, (N, w)).astype(np.uint16)
        tok[np.arange(w)[None, :] >= rng.integers(1, w + 1, N)[:, None]] = 0
        out[role] = tok
    return out


def raw(path: Path, rows: np.ndarray, sidecar: dict[str, object]) -> Path:
    """``rows.tofile`` beside a sidecar written by hand, as a user's own tool writes."""
    rows.tofile(path)
    Path(f"{path}.json").write_text(json.dumps(sidecar))
    return path


@pytest.mark.parametrize(
    ("sidecar", "rows", "says"),
    [
        ({"dtype": "uint32", "width": 24}, 30, r"uint16 x 24"),  # the dtype mistaken
        ({"dtype": "uint16", "width": 8}, 180, r"uint16 x 24"),  # the width mistaken
    ],
)
def test_a_hand_written_sidecar_of_the_wrong_dtype_or_width_is_named(
    tmp_path: Path, sidecar: dict[str, object], rows: int, says: str
) -> None:
    # Until 2026-12-07 only "member 'pos' has 30 rows but ... has 60; every member needs
    # one row per group": the user looked for lost rows, not at the sidecar.
    tok = written(tmp_path)
    np.save(tmp_path / "query.npy", tok["query"])
    pos = raw(tmp_path / "pos.bin", tok["pos"], sidecar)
    with pytest.raises(DataError) as err:
        PairRows({"query": tmp_path / "query.npy", "pos": pos})
    msg = str(err.value)
    assert f"member 'pos' has {rows} rows but" in msg
    assert f"{pos}.json" in msg and f"says {sidecar['dtype']}, width {sidecar['width']}" in msg
    assert "48 bytes a row" in msg and says in msg  # 60 rows of the file's 2,880 bytes


def test_the_first_members_sidecar_is_named_when_it_is_the_wrong_one(tmp_path: Path) -> None:
    tok = written(tmp_path)
    q = raw(tmp_path / "query.bin", tok["query"], {"dtype": "uint32", "width": 8})
    np.save(tmp_path / "pos.npy", tok["pos"])
    with pytest.raises(DataError, match=rf"{q}\.json says uint32, width 8.*uint16 x 8"):
        PairRows({"query": q, "pos": tmp_path / "pos.npy"})


def test_a_file_truly_short_of_rows_is_not_blamed_on_its_sidecar(tmp_path: Path) -> None:
    tok = written(tmp_path)
    np.save(tmp_path / "query.npy", tok["query"])
    pos = raw(tmp_path / "pos.bin", tok["pos"][:50], {"dtype": "uint16", "width": 24})
    with pytest.raises(DataError, match="member 'pos' has 50 rows but") as err:
        PairRows({"query": tmp_path / "query.npy", "pos": pos})
    assert "sidecar" not in str(err.value)


def test_a_token_file_given_as_a_mask_names_the_member_and_the_order(tmp_path: Path) -> None:
    tok = written(tmp_path)
    np.save(tmp_path / "query.npy", tok["query"].astype(np.int64))  # tokenizer output
    np.save(tmp_path / "query_mask.npy", (tok["query"] != 0).astype(np.int64))
    np.save(tmp_path / "pos.npy", tok["pos"])
    q, qm = tmp_path / "query.npy", tmp_path / "query_mask.npy"
    src = PairRows({"query": (qm, q), "pos": tmp_path / "pos.npy"}, shuffle=False)  # swapped
    with pytest.raises(DataError) as err:
        src.read(0, np.arange(4))
    msg = str(err.value)
    assert msg.startswith(f"{q}: mask values must be 0 or 1; row 0 holds [")  # as before
    assert "member 'query'" in msg and "(tokens, mask)" in msg and "token file first" in msg
    rows = PaddedRows(q, q, context=7)
    with pytest.raises(DataError, match=r"mask values must be 0 or 1.*token file first"):
        rows.read(0, np.arange(4))


def test_negatives_saved_as_one_3d_array_say_how_to_give_them(tmp_path: Path) -> None:
    tok = written(tmp_path)
    negs = np.stack([np.roll(tok["pos"], j + 1, axis=0) for j in range(K)], axis=1)
    np.save(tmp_path / "negs.npy", negs)  # (groups, k, width): k hard negatives a group
    np.save(tmp_path / "query.npy", tok["query"])
    with pytest.raises(FormatError) as err:
        PairRows({"query": tmp_path / "query.npy", "negs": tmp_path / "negs.npy"})
    msg = str(err.value)
    assert msg.startswith(f"{tmp_path / 'negs.npy'}: expected a 2-D (rows, width) array, ")
    assert "found shape (60, 3, 24)" in msg and "a[:, j]" in msg and "optional=" in msg
    # The way it names works, and reads the negatives as stored.
    members = {"query": tmp_path / "query.npy"}
    for j in range(K):
        np.save(tmp_path / f"neg{j}.npy", negs[:, j])
        members[f"neg{j}"] = tmp_path / f"neg{j}.npy"
    got = PairRows(members, shuffle=False).read(0, np.arange(N))
    for j in range(K):
        np.testing.assert_array_equal(got[f"neg{j}_x"], negs[:, j])
