"""``vocab_size=`` on padded rows and pairs: every stored token a batch reads (padding
included) must be an id in ``[0, V)``; the first row holding one outside, in plan order,
is refused naming the file, row, sample, position and id. Real ``.npy`` and raw ``.bin``
files with their sidecar; the check's twin for token files is test_token_vocab.py."""

from __future__ import annotations

import pickle
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError, FormatError
from headrace.formats import PaddedRows, PairRows, TokenSource, write_row_file
from headrace.pipeline import Loader, Mapped, Mixture
from headrace.testing import batch_digest

V = 32_000
ROWS, W, L = 300, 40, 31


def rows_of(path: Path, *, dtype: type = np.int32, seed: int = 0) -> tuple[Path, np.ndarray]:
    """``ROWS`` rows of ``W`` ids in ``[1, V)``, each right-padded with 0 after 8 to W ids."""
    rng = np.random.default_rng(seed)
    tok = rng.integers(1, V, (ROWS, W)).astype(dtype)
    lengths = rng.integers(8, W + 1, ROWS)
    tok[np.arange(W)[None, :] >= lengths[:, None]] = 0
    write_row_file(path, tok)
    return path, tok


def refused(src: PaddedRows | PairRows, samples: np.ndarray) -> str:
    with pytest.raises(FormatError) as info:
        src.read(0, samples)
    return str(info.value)


@pytest.mark.parametrize("ext", [".npy", ".bin"])
def test_ids_in_range_read_as_without_the_check(tmp_path: Path, ext: str) -> None:
    path, tok = rows_of(tmp_path / f"tok{ext}")
    tok[5, 0], tok[6, 1] = V - 1, 0  # the largest id allowed, and the smallest
    write_row_file(path, tok)
    digests = []
    for vocab in (None, V):
        src = PaddedRows(path, context=L, truncate=True, vocab_size=vocab)
        with Loader(src, batch_size=16, steps=40) as ld:
            digests.append(batch_digest(ld))
    assert digests[0] == digests[1]


@pytest.mark.parametrize(
    ("col", "value", "key"),
    [(3, V, "x"), (L, V + 9, "y"), (0, -1, "x"), (L, -7, "y")],
    ids=["V-in-x", "past-in-y-last", "negative-in-x", "negative-in-y-last"],
)
@pytest.mark.parametrize("ext", [".npy", ".bin"])
def test_an_id_outside_is_refused_naming_row_sample_position_and_id(
    tmp_path: Path, ext: str, col: int, value: int, key: str
) -> None:
    path, tok = rows_of(tmp_path / f"tok{ext}")
    tok[17, :W] = np.arange(1, W + 1)  # a full row: col L is y's last target, not padding
    tok[17, col] = value
    write_row_file(path, tok)
    src = PaddedRows(path, context=L, truncate=True, shuffle=False, vocab_size=V)
    src.read(0, np.arange(0, 17))  # the rows before pass
    msg = refused(src, np.arange(10, 30))
    assert f"{path}: row 17 (sample 17), tokens, position {col}: token id {value} " in msg
    assert f"outside the vocabulary [0, {V}) (vocab_size={V})" in msg
    assert f"the largest id in this sample is {tok[17, : L + 1].max()}" in msg
    assert ("the smallest" in msg) == (value < 0)
    # Without vocab_size the id comes through as it is stored (y: the label shift's last).
    plain = PaddedRows(path, context=L, truncate=True, shuffle=False).read(0, np.array([17]))
    assert plain[key][0, col - (key == "y")] == value


def test_the_first_bad_row_in_plan_order_whatever_the_reader(tmp_path: Path) -> None:
    path, tok = rows_of(tmp_path / "tok.npy")
    tok[[40, 250], 2] = V + 1, -5
    write_row_file(path, tok)
    samples = np.array([7, 250, 3, 40], dtype=np.int64)  # 250 comes first in the batch
    msgs = {
        refused(
            PaddedRows(path, context=L, truncate=True, shuffle=False, vocab_size=V, reader=r),
            samples,
        )
        for r in ("mmap", "pread", "adaptive")
    }
    (msg,) = msgs
    assert "row 250 (sample 250)" in msg and "token id -5 " in msg
    # A windowed shuffle reads its rows from whole windows: the first bad one of its plan.
    win = PaddedRows(path, context=L, truncate=True, shuffle="window", window_rows=64, vocab_size=V)
    plan = win.rows_of(0, np.arange(ROWS))
    first = int(np.flatnonzero(np.isin(plan, [40, 250]))[0])
    assert f"row {plan[first]} (sample {first})" in refused(win, np.arange(first + 8))


def test_stored_padding_is_checked_as_ids_and_pad_id_must_be_one(tmp_path: Path) -> None:
    path, tok = rows_of(tmp_path / "tok.npy")
    tok[tok == 0] = 2  # padding stored as pad id 2
    write_row_file(path, tok)
    got = PaddedRows(path, context=L, truncate=True, pad_id=2, pad_side="left", vocab_size=V)
    assert got.read(0, np.arange(64))["x"].max() < V
    with pytest.raises(ConfigError, match=rf"pad_id=-100 is outside the vocabulary \[0, {V}\)"):
        PaddedRows(path, context=L, truncate=True, pad_id=-100, vocab_size=V)
    # ignore_index is no id: -100 in y is headrace's, not the data's.
    got = PaddedRows(path, context=L, truncate=True, pad_id=2, ignore_index=-100, vocab_size=V)
    assert (got.read(0, np.arange(64))["y"] == -100).any()


@pytest.mark.parametrize("vocab", [0, -5, True, 2.5, "32000"])
def test_a_vocab_size_that_is_no_positive_integer_is_refused(tmp_path: Path, vocab: object) -> None:
    path, _ = rows_of(tmp_path / "tok.npy")
    with pytest.raises(ConfigError, match="vocab_size must be a positive integer"):
        PaddedRows(path, context=L, vocab_size=vocab)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="vocab_size must be a positive integer"):
        PairRows({"anchor": path}, vocab_size=vocab)  # type: ignore[arg-type]


def test_vocab_size_is_no_part_of_the_fingerprint_and_travels_to_workers(tmp_path: Path) -> None:
    # It refuses batches, never changes them: a run saved before it was set resumes.
    path, tok = rows_of(tmp_path / "tok.npy")
    assert (
        PaddedRows(path, context=L, truncate=True).fingerprint()
        == PaddedRows(path, context=L, truncate=True, vocab_size=V).fingerprint()
    )
    assert PairRows({"a": path}).fingerprint() == PairRows({"a": path}, vocab_size=V).fingerprint()
    # A state saved without the check loads into a loader with it, and back.
    with Loader(PaddedRows(path, context=L, truncate=True), batch_size=8, seed=1, steps=6) as ld:
        list(islice(ld, 3))
        state = ld.state_dict()
        rest = batch_digest(ld)
    with Loader(
        PaddedRows(path, context=L, truncate=True, vocab_size=V), batch_size=8, seed=1, steps=6
    ) as ld:
        ld.load_state_dict(state)
        assert batch_digest(ld) == rest
        back = ld.state_dict()
    with Loader(PaddedRows(path, context=L, truncate=True), batch_size=8, seed=1, steps=6) as ld:
        ld.load_state_dict(back)
    tok[0, 0] = V
    write_row_file(path, tok)
    copy = pickle.loads(
        pickle.dumps(PaddedRows(path, context=L, truncate=True, shuffle=False, vocab_size=V))
    )
    assert "row 0 (sample 0)" in refused(copy, np.arange(4))


def pairs(tmp_path: Path) -> dict[str, Path]:
    widths = {"anchor": 24, "positive": 40, "negative": 16}
    out = {}
    for i, (name, w) in enumerate(widths.items()):
        tok = np.random.default_rng(i).integers(0, V, (ROWS, w)).astype(np.uint32)
        tok[:, w // 2 :] = 0
        write_row_file(tmp_path / f"{name}.tok.bin", tok)
        out[name] = tmp_path / f"{name}.tok.bin"
    return out


@pytest.mark.parametrize("member", ["anchor", "positive", "negative"])
def test_pairs_refuse_an_id_outside_in_any_member(tmp_path: Path, member: str) -> None:
    paths = pairs(tmp_path)
    ok = PairRows(paths, shuffle=False, vocab_size=V)
    assert batch_digest([ok.read(0, np.arange(64))]) == batch_digest(
        [PairRows(paths, shuffle=False).read(0, np.arange(64))]
    )
    tok = np.fromfile(paths[member], dtype=np.uint32).reshape(ROWS, -1)
    tok[9, 5] = V + 3
    tok[4, -1] = 2**32 - 1  # an int32 -1 stored as uint32, in the stored padding
    write_row_file(paths[member], tok)
    msg = refused(PairRows(paths, shuffle=False, vocab_size=V), np.arange(12))
    w = tok.shape[1]
    assert f"{paths[member]}: row 4 (sample 4), member '{member}', position {w - 1}" in msg
    assert f"token id {2**32 - 1} is outside the vocabulary [0, {V})" in msg


def test_pairs_name_the_earliest_group_across_members(tmp_path: Path) -> None:
    paths = pairs(tmp_path)
    for name, row in (("anchor", 30), ("negative", 20)):
        tok = np.fromfile(paths[name], dtype=np.uint32).reshape(ROWS, -1)
        tok[row, 0] = V
        write_row_file(paths[name], tok)
    msg = refused(PairRows(paths, shuffle=False, vocab_size=V), np.arange(40))
    assert "row 20 (sample 20), member 'negative', position 0" in msg


def test_pairs_pad_id_is_checked_only_where_it_pads(tmp_path: Path) -> None:
    paths = pairs(tmp_path)
    with pytest.raises(ConfigError, match=rf"pad_id={V} is outside the vocabulary"):
        PairRows(paths, pad_id=V, vocab_size=V)
    masks = {}
    for name, p in paths.items():
        tok = np.fromfile(p, dtype=np.uint32).reshape(ROWS, -1)
        write_row_file(tmp_path / f"{name}.mask.bin", (tok != 0).astype(np.uint8))
        masks[name] = (p, tmp_path / f"{name}.mask.bin")
    PairRows(masks, pad_id=V, vocab_size=V).close()  # every member has a mask: no pad id


def test_a_mixture_checks_each_source_against_its_own_vocabulary(tmp_path: Path) -> None:
    small, _ = rows_of(tmp_path / "small.npy", seed=1)  # ids below 32,000
    big, tok = rows_of(tmp_path / "big.npy", seed=2)
    tok[tok != 0] += V  # a 128k tokenizer's ids: fine for its own source only
    write_row_file(big, tok)

    def mix(big_vocab: int) -> Mixture:
        return Mixture(
            {
                "small": PaddedRows(small, context=L, truncate=True, vocab_size=V),
                "big": PaddedRows(big, context=L, truncate=True, vocab_size=big_vocab),
            },
            [0.5, 0.5],
            batch_size=16,
        )

    with Loader(mix(4 * V), batch_size=16, steps=20) as ld:
        assert len(list(ld)) == 20
    with (
        Loader(mix(V), batch_size=16, steps=20) as ld,
        pytest.raises(FormatError, match=r"big\.npy: row \d+ \(sample \d+\), tokens") as info,
    ):
        list(ld)
    assert "source 'big'" in "\n".join(getattr(info.value, "__notes__", []))


def test_the_refusal_is_the_same_on_any_host_count(tmp_path: Path) -> None:
    # The host whose slice holds the batch's first bad row refuses as one host does; the
    # message counts the row's ids outside, not the (host's) batch's.
    path, tok = rows_of(tmp_path / "tok.npy")
    tok[tok != 0] += V // 2  # about half of each row's ids are past V
    write_row_file(path, tok)

    def refusals(world: int) -> set[str]:
        out = set()
        for rank in range(world):
            src = PaddedRows(path, context=L, truncate=True, vocab_size=V, reader="pread")
            with (
                Loader(src, batch_size=16, seed=4, rank=rank, world_size=world, steps=2) as ld,
                pytest.raises(FormatError) as info,
            ):
                list(ld)
            out.add(str(info.value))
        return out

    (one,) = refusals(1)
    assert one in refusals(2) and one in refusals(4)


def test_a_replaced_empty_row_is_refused_by_the_row_that_stood_in(tmp_path: Path) -> None:
    tok = np.random.default_rng(0).integers(1, V, (50, W)).astype(np.int32)
    tok[:, 5] = V + np.arange(50)  # every row holds an id outside that names its row
    mask = np.ones((50, W), np.uint8)
    mask[3] = 0  # row 3 has no target: replaced for training, kept for evaluation
    np.save(tmp_path / "tok.npy", tok)
    np.save(tmp_path / "mask.npy", mask)
    for empty, row in (("replace", None), ("keep", 3)):
        src = PaddedRows(tmp_path / "tok.npy", tmp_path / "mask.npy", context=L, shuffle=False,
                         vocab_size=V, empty_rows=empty, truncate=True)  # fmt: skip
        if row is None:
            (row,) = src.final_rows(0, np.array([3])).tolist()
            assert row != 3
        with pytest.raises(FormatError, match=rf"row {row} \(sample 3\), tokens, position 5: "):
            src.read(0, np.array([3]))


def test_a_mixture_of_a_token_file_and_padded_rows_checks_both(tmp_path: Path) -> None:
    ids = np.random.default_rng(3).integers(0, V, 5000).astype(np.uint16)
    ids.tofile(tmp_path / "val.bin")
    path, tok = rows_of(tmp_path / "sft.npy")
    tok[33, 4] = V
    write_row_file(path, tok)
    as_tokens = lambda a, s: {k: a[k].astype(np.uint16) for k in ("x", "y")}  # noqa: E731
    mix = Mixture(
        [
            TokenSource(
                tmp_path / "val.bin", dtype="uint16", context=L, shuffle=False, vocab_size=V
            ),
            Mapped(
                PaddedRows(
                    path, context=L, truncate=True, shuffle=False, vocab_size=V, empty_rows="keep"
                ),
                as_tokens,
            ),
        ],
        [0.5, 0.5],
        batch_size=8,
    )
    with (
        Loader(mix, batch_size=8, epochs=1) as ld,
        pytest.raises(FormatError, match=r"sft\.npy: row 33 \(sample 33\), tokens, position 4"),
    ):
        for b in ld:
            assert b["x"].max() < V
