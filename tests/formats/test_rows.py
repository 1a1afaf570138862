from __future__ import annotations

import json
import pickle
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _row_files import odirect_works, padded_rows
from headrace.errors import ConfigError, DataError, EmptyRowsError, FormatError
from headrace.formats import PaddedRows, _row_file, open_row_file, write_row_file
from headrace.formats._row_plan import sample_rows
from headrace.io import RangeReader, ReaderConfig
from headrace.pipeline import Loader
from headrace.plan import retry_rows
from headrace.testing import assert_resume_exact, batch_digest

# -- hand-computed padding --------------------------------------------------------

TOK = np.array(
    [
        [5, 6, 7, 8, 0, 0],  # content of 4, two pads
        [9, 10, 11, 12, 13, 14],  # full width
        [3, 4, 0, 0, 0, 0],
    ],
    dtype=np.uint16,
)
MASK = np.array(
    [
        [0, 0, 1, 1, 0, 0],
        [0, 1, 1, 1, 1, 1],
        [0, 1, 0, 0, 0, 0],
    ],
    dtype=np.uint8,
)


@pytest.fixture
def tiny(tmp_path: Path) -> tuple[Path, Path]:
    write_row_file(tmp_path / "tok.npy", TOK)
    write_row_file(tmp_path / "mask.npy", MASK)
    return tmp_path / "tok.npy", tmp_path / "mask.npy"


def test_right_padding_by_hand(tiny: tuple[Path, Path]) -> None:
    src = PaddedRows(*tiny, context=5, shuffle=False)
    got = src.read(0, np.arange(3))
    np.testing.assert_array_equal(got["x"], [[5, 6, 7, 8, 0], [9, 10, 11, 12, 13], [3, 4, 0, 0, 0]])
    np.testing.assert_array_equal(
        got["y"], [[-1, 7, 8, -1, -1], [10, 11, 12, 13, 14], [4, -1, -1, -1, -1]]
    )
    np.testing.assert_array_equal(
        got["loss_mask"], [[0, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    )
    assert got["x"].dtype == np.int32 and got["loss_mask"].dtype == np.bool_


def test_left_padding_by_hand(tiny: tuple[Path, Path]) -> None:
    src = PaddedRows(*tiny, context=5, shuffle=False, pad_side="left", ignore_index=-100)
    got = src.read(0, np.arange(3))
    # Row 0 left-padded is [0, 0, 5, 6, 7, 8]; the first content token's target
    # position (predicted from a pad) is ignored.
    np.testing.assert_array_equal(got["x"], [[0, 0, 5, 6, 7], [9, 10, 11, 12, 13], [0, 0, 0, 0, 3]])
    np.testing.assert_array_equal(
        got["y"],
        [[-100, -100, -100, 7, 8], [10, 11, 12, 13, 14], [-100, -100, -100, -100, 4]],
    )
    np.testing.assert_array_equal(
        got["loss_mask"], [[0, 0, 0, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]]
    )


def test_no_mask_file_targets_every_non_pad_token(tiny: tuple[Path, Path]) -> None:
    src = PaddedRows(tiny[0], context=5, shuffle=False)
    got = src.read(0, np.arange(3))
    np.testing.assert_array_equal(got["y"][0], [6, 7, 8, -1, -1])
    np.testing.assert_array_equal(got["loss_mask"][2], [1, 0, 0, 0, 0])


def test_stored_width_wider_than_context_reads_prefix(tiny: tuple[Path, Path]) -> None:
    src = PaddedRows(*tiny, context=3, shuffle=False, truncate=True)
    got = src.read(0, np.array([1]))
    np.testing.assert_array_equal(got["x"], [[9, 10, 11]])
    np.testing.assert_array_equal(got["y"], [[10, 11, 12]])


@pytest.mark.parametrize("shuffle", [False, "window"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_content_past_context_is_refused_unless_truncate(
    tiny: tuple[Path, Path], shuffle: Any, side: str
) -> None:
    # Rows stored 6 wide, context 3: row 1 holds content (tokens, targets) past the 4
    # columns read. It was cut silently: its targets 13 and 14 never seen, and left
    # padding (which moves the content's end to the last column) kept its start.
    for mask in (tiny[1], None):
        kw: dict[str, Any] = {"context": 3, "shuffle": shuffle, "pad_side": side}
        src = PaddedRows(tiny[0], mask, **kw)
        with pytest.raises(
            ConfigError,
            match=r"tok\.npy: row 1 \(sample \d+\) has content up to column 5 of its 6 "
            r"stored columns, past the first context \+ 1 = 4 that context=3 reads .*its last 2 "
            r"stored tokens would be cut\. Pass truncate=True .* or context=5 to read them whole$",
        ):
            src.read(0, np.arange(3))
        cut = PaddedRows(tiny[0], mask, truncate=True, **kw)
        assert cut.fingerprint() == src.fingerprint()  # refuses batches, never changes them
        assert cut.read(0, np.arange(3))["x"].shape == (3, 3)
        # Rows 0 and 2 fit: read whole, then cut to 4 columns, the same as truncate=True.
        kw["shuffle"] = False
        fits = PaddedRows(tiny[0], mask, **kw).read(0, np.array([0, 2]))
        want = PaddedRows(tiny[0], mask, truncate=True, **kw).read(0, np.array([0, 2]))
        for k in ("x", "y", "loss_mask"):
            np.testing.assert_array_equal(fits[k], want[k])
    whole = PaddedRows(*tiny, context=5, shuffle=False)  # width == context + 1: nothing to cut
    assert whole.read(0, np.arange(3))["x"].shape == (3, 5)
    with pytest.raises(ConfigError, match=r"truncate must be True or False \(got 'yes'\)"):
        PaddedRows(*tiny, context=3, truncate="yes")  # type: ignore[arg-type]


# -- real-sized files: blocks, duplicates, tail, strategies ----------------------------

N_ROWS, W = 300, 1025  # 2050-byte uint16 rows straddle every 4 KiB block


def make_rows(root: Path, *, empty_every: int = 0, ext: str = ".npy") -> tuple[Path, Path]:
    return padded_rows(root, N_ROWS, W, seed=1, prompt_mod=13, ext=ext, empty_every=empty_every)


def reference(tok: np.ndarray, mask: np.ndarray, rows: np.ndarray, L: int) -> dict:
    t = tok[rows, : L + 1].astype(np.int32)
    m = mask[rows, 1 : L + 1].astype(bool)
    y = np.where(m, t[:, 1:], -1)
    return {"x": t[:, :L], "y": y, "loss_mask": m}


def strategies() -> list[str]:
    return ["mmap", "pread", "odirect", "adaptive"]


def reader_for(strategy: str, tmp: Path) -> ReaderConfig:
    if strategy == "odirect" and not odirect_works(tmp / "tok.npy"):
        pytest.skip("O_DIRECT unsupported on this filesystem")
    # A small span forces many coalesced pieces, each row crossing piece ends.
    return ReaderConfig(strategy=strategy, max_span=8192, max_gap=4096)  # type: ignore[arg-type]


@pytest.mark.parametrize("strategy", strategies())
def test_rows_spanning_blocks_duplicates_and_tail(tmp_path: Path, strategy: str) -> None:
    tp, mp = make_rows(tmp_path)
    tok, mask = np.load(tp), np.load(mp)
    src = PaddedRows(tp, mp, context=W - 1, reader=reader_for(strategy, tmp_path), shuffle=False)
    samples = np.array([N_ROWS - 1, 3, 3, N_ROWS + 3, 0, 2 * N_ROWS - 1, 7, 123], dtype=np.int64)
    got = src.read(0, samples)
    want = reference(tok, mask, samples % N_ROWS, W - 1)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    src.close()


def test_samples_per_epoch_is_the_row_count(tmp_path: Path) -> None:
    src = PaddedRows(*make_rows(tmp_path), context=512)
    assert src.samples_per_epoch == len(src) == src.tokens.rows > 0
    src.close()


def test_raw_bin_with_sidecar_matches_npy(tmp_path: Path) -> None:
    a = PaddedRows(*make_rows(tmp_path), context=512, truncate=True)
    b = PaddedRows(*make_rows(tmp_path, ext=".bin"), context=512, truncate=True)
    side = json.loads((tmp_path / "tok.bin.json").read_text())
    assert side == {"dtype": "uint16", "width": W, "rows": a.tokens.rows}
    s = np.arange(64, dtype=np.int64) * 37
    assert batch_digest([a.read(5, s)]) == batch_digest([b.read(5, s)])


def test_pickled_copy_reads_the_same(tmp_path: Path) -> None:
    src = PaddedRows(*make_rows(tmp_path), context=100, truncate=True, reader="pread")
    s = np.arange(40, dtype=np.int64)
    first = src.read(2, s)
    copy = pickle.loads(pickle.dumps(src))
    assert batch_digest([copy.read(2, s)]) == batch_digest([first])
    copy.close()
    src.close()


def test_shuffle_is_a_permutation_per_epoch(tmp_path: Path) -> None:
    src = PaddedRows(*make_rows(tmp_path), context=8)
    e0 = src.rows_of(3, np.arange(N_ROWS))
    e1 = src.rows_of(3, np.arange(N_ROWS, 2 * N_ROWS))
    assert sorted(e0.tolist()) == list(range(N_ROWS)) == sorted(e1.tolist())
    assert not np.array_equal(e0, e1)
    assert not np.array_equal(e0, src.rows_of(4, np.arange(N_ROWS)))
    # "none", as file sources name it, is shuffle=False (it was refused).
    flat = PaddedRows(*make_rows(tmp_path), context=8, shuffle="none")
    assert (
        flat.fingerprint()
        == PaddedRows(*make_rows(tmp_path), context=8, shuffle=False).fingerprint()
    )
    assert flat.rows_of(3, np.arange(N_ROWS)).tolist() == list(range(N_ROWS))


# -- empty rows ------------------------------------------------------------------------


def test_empty_rows_replaced_same_across_strategies_hosts_and_order(tmp_path: Path) -> None:
    tp, mp = make_rows(tmp_path, empty_every=3)  # a third of all rows are empty
    tok, mask = np.load(tp), np.load(mp)
    digests = set()
    # O_DIRECT where the filesystem takes it: its replacement rounds are aligned reads.
    direct = ["odirect"] if odirect_works(tp) else []
    for strategy in ["mmap", "pread", "adaptive", *direct]:
        for world in (1, 2, 4):
            parts = []
            for rank in range(world):
                src = PaddedRows(tp, mp, context=W - 1, reader=reader_for(strategy, tmp_path))
                with Loader(
                    src, batch_size=16, seed=9, rank=rank, world_size=world, prefetch=0, steps=30
                ) as ld:
                    parts.append(list(ld))
            union = [
                {k: np.concatenate([p[t][k] for p in parts]) for k in parts[0][t]}
                for t in range(30)
            ]
            digests.add(batch_digest(union))
            assert all(b["loss_mask"].any(axis=1).all() for b in union)
    assert len(digests) == 1
    # Read order: each sample alone, in reverse, gives the same rows.
    src = PaddedRows(tp, mp, context=W - 1)
    samples = np.arange(16 * 30, dtype=np.int64)
    whole = src.read(9, samples)
    rev = src.read(9, samples[::-1].copy())
    for k in whole:
        np.testing.assert_array_equal(rev[k][::-1], whole[k])
    one = src.read(9, samples[[0]])
    single = {k: v[0] for k, v in one.items()}
    np.testing.assert_array_equal(single["x"], whole["x"][0])
    # The replaced rows are the first non-empty retry rows of each sample.
    first_rows = src.rows_of(9, samples)
    final = src.final_rows(9, samples)
    for i in np.flatnonzero(mask[first_rows, 1:W].sum(1) == 0)[:20].tolist():
        a = 1
        r = int(retry_rows(9, samples[[i]], a, N_ROWS)[0])
        while not mask[r, 1:W].any():
            a += 1
            r = int(retry_rows(9, samples[[i]], a, N_ROWS)[0])
        assert final[i] == r
    want = reference(tok, mask, final, W - 1)
    for k in want:
        np.testing.assert_array_equal(whole[k], want[k])


def test_each_replacement_round_is_one_read_per_file(tmp_path: Path) -> None:
    tp, mp = make_rows(tmp_path, empty_every=2)
    with RangeReader("pread") as reader:
        src = PaddedRows(tp, mp, context=W - 1, reader=reader)
        samples = np.arange(64, dtype=np.int64)
        rows = src.rows_of(0, samples)
        final = src.final_rows(0, samples)
        before = reader.stats.reads
        src.read(0, samples)
        reads = reader.stats.reads - before
        src.close()  # a borrowed reader stays open
        assert not reader.closed
    # Rounds: the largest number of retries any one sample needed.
    rounds = 0
    for i in np.flatnonzero(rows != final).tolist():
        a = 1
        while int(retry_rows(0, samples[[i]], a, N_ROWS)[0]) != final[i]:
            a += 1
        rounds = max(rounds, a)
    assert rounds >= 1
    assert reads == 2 * (1 + rounds)  # tokens + mask, first read plus one per round


def test_replacement_limit_raises_naming_dataset_and_rows(tmp_path: Path) -> None:
    tp, mp = make_rows(tmp_path, empty_every=1)  # every row empty
    src = PaddedRows(tp, mp, context=16, truncate=True, max_retries=3)
    with pytest.raises(EmptyRowsError, match=r"tok\.npy.*after 3 replacement.*sample 5 \(row"):
        src.read(0, np.array([5, 6]))
    zero = PaddedRows(
        *make_rows(tmp_path, empty_every=2),
        context=W - 1,
        truncate=True,
        shuffle=False,
        max_retries=0,
    )
    with pytest.raises(EmptyRowsError, match="sample 0 "):
        zero.read(0, np.array([0, 1]))
    assert zero.read(0, np.array([1]))["x"].shape == (1, W - 1)


# -- resume ------------------------------------------------------------------------------


def test_resume_exact(tmp_path: Path) -> None:
    tp, mp = make_rows(tmp_path, empty_every=5)

    def make() -> Loader:
        return Loader(
            PaddedRows(tp, mp, context=32, truncate=True, pad_side="left"),
            batch_size=8,
            seed=1,
            prefetch=2,
            chunk_steps=4,
        )

    assert_resume_exact(make, steps=45, resume_at=[0, 1, 36, 37, 40])  # 37.5 steps per epoch
    with make() as ld:
        first = list(islice(iter(ld), 2))
    assert first[0]["x"].shape == (8, 32)


# -- bad input ---------------------------------------------------------------------------


def test_bad_input_errors_name_file(tmp_path: Path) -> None:
    tp, mp = make_rows(tmp_path)
    write_row_file(tmp_path / "short.npy", np.zeros((N_ROWS, W - 1), np.uint8))
    with pytest.raises(DataError, match=r"short\.npy: mask shape \(300, 1024\) disagrees.*tok"):
        PaddedRows(tp, tmp_path / "short.npy", context=8, truncate=True)
    with pytest.raises(ConfigError, match=r"tok\.npy: stored width 1025 is smaller than context"):
        PaddedRows(tp, mp, context=W, truncate=True)
    bad = np.load(mp)
    bad[7, 3] = 2
    write_row_file(tmp_path / "bad.npy", bad)
    src = PaddedRows(tp, tmp_path / "bad.npy", context=8, truncate=True, shuffle=False)
    with pytest.raises(DataError, match=r"bad\.npy: mask values must be 0 or 1; row 7 holds \[2\]"):
        src.read(0, np.arange(10))
    src.read(0, np.arange(7))  # rows without the bad value are fine
    write_row_file(tmp_path / "neg.npy", -np.ones((N_ROWS, W), np.int8))
    with pytest.raises(DataError, match=r"neg\.npy: mask values.*\[-1\]"):
        PaddedRows(tp, tmp_path / "neg.npy", context=8, truncate=True).read(0, np.arange(2))
    with pytest.raises(ConfigError, match="pad_side"):
        PaddedRows(tp, mp, context=8, truncate=True, pad_side="middle")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="pad_id=300 does not fit"):
        PaddedRows(tp, mp, context=8, truncate=True, dtype=np.int8, pad_id=300)
    with pytest.raises(ConfigError, match="ignore_index=-1000 does not fit"):
        PaddedRows(tp, mp, context=8, truncate=True, dtype=np.int8, ignore_index=-1000)
    with pytest.raises(ConfigError, match="signed"):
        PaddedRows(tp, mp, context=8, truncate=True, dtype=np.uint32)
    with pytest.raises(ConfigError, match="context must be a positive"):
        PaddedRows(tp, mp, context=0, truncate=True)
    write_row_file(tmp_path / "float.npy", np.zeros((N_ROWS, W), np.float32))
    with pytest.raises(
        ConfigError, match=r"float\.npy: mask dtype must be integer or bool \(found"
    ):
        PaddedRows(tp, tmp_path / "float.npy", context=8, truncate=True)
    with pytest.raises(ConfigError, match=r"max_retries must be an integer >= 0 \(got -1\)"):
        PaddedRows(tp, mp, context=8, truncate=True, max_retries=-1)


def test_bad_row_files(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"\0" * 100)
    with pytest.raises(ConfigError, match=r"a\.bin: a raw row file needs a dtype and a width"):
        open_row_file(tmp_path / "a.bin")
    with pytest.raises(DataError, match=r"a\.bin: file size 100 is not a multiple of the row"):
        open_row_file(tmp_path / "a.bin", dtype="uint16", width=7)
    assert open_row_file(tmp_path / "a.bin", dtype="uint16", width=10).rows == 5
    (tmp_path / "a.bin.json").write_text("{nope")
    with pytest.raises(FormatError, match=r"a\.bin\.json: unreadable row sidecar"):
        open_row_file(tmp_path / "a.bin")
    (tmp_path / "a.bin.json").write_text(json.dumps({"dtype": "uint16", "width": 10}))
    with pytest.raises(ConfigError, match="width 5 given but"):
        open_row_file(tmp_path / "a.bin", width=5)
    with pytest.raises(ConfigError, match="dtype uint8 given but"):
        open_row_file(tmp_path / "a.bin", dtype="uint8")
    np.save(tmp_path / "flat.npy", np.zeros(10, np.uint16))
    with pytest.raises(FormatError, match=r"flat\.npy: expected a 2-D"):
        open_row_file(tmp_path / "flat.npy")
    np.save(tmp_path / "f.npy", np.asfortranarray(np.zeros((4, 3), np.uint16)))
    with pytest.raises(FormatError, match=r"f\.npy: the array is stored in Fortran"):
        open_row_file(tmp_path / "f.npy")
    np.save(tmp_path / "t.npy", np.zeros((4, 3), np.uint16))
    with open(tmp_path / "t.npy", "r+b") as fh:
        fh.truncate((tmp_path / "t.npy").stat().st_size - 2)
    with pytest.raises(FormatError, match=r"t\.npy: truncated"):
        open_row_file(tmp_path / "t.npy")
    np.save(tmp_path / "e.npy", np.zeros((0, 3), np.uint16))
    with pytest.raises(DataError, match=r"e\.npy: empty"):
        open_row_file(tmp_path / "e.npy")
    (tmp_path / "x.npy").write_bytes(b"hello world, not npy")
    with pytest.raises(FormatError, match=r"x\.npy: not an NPY file"):
        open_row_file(tmp_path / "x.npy")
    np.save(tmp_path / "fl.npy", np.zeros((4, 3), np.float32))
    with pytest.raises(ConfigError, match=r"fl\.npy: token dtype must be an integer"):
        PaddedRows(tmp_path / "fl.npy", context=2)


def test_sample_rows_unshuffled_wraps() -> None:
    np.testing.assert_array_equal(sample_rows(0, np.array([0, 5, 6, 13]), 6, False), [0, 5, 0, 1])


# -- review: boundaries, dtypes and bad input ---------------------------------------------


def _by_definition(t: np.ndarray, m: np.ndarray | None, L: int, pad: int, side: str, ign: int):
    """One row padded the slow, obvious way: build the padded row, then shift it."""
    t = t[: L + 1].astype(np.int64)
    mm = None if m is None else m[: L + 1] != 0
    if side == "right":
        pt, pm, s = t, (mm if mm is not None else t != pad), 0
    else:
        real = (t != pad) | (mm if mm is not None else False)
        c = int(np.flatnonzero(real)[-1]) + 1
        s = L + 1 - c
        pt = np.concatenate([np.full(s, pad), t[:c]])
        pm = np.concatenate([np.zeros(s, bool), (mm if mm is not None else t != pad)[:c]])
    loss = pm[1:].copy()
    loss[: max(s, 0)] = False  # a target predicted from a pad is never a loss target
    return pt[:L], np.where(loss, pt[1:], ign), loss


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("tok_dtype", ["uint16", "int32", "int64"])
def test_padding_boundaries_against_definition(
    tmp_path: Path, side: str, with_mask: bool, tok_dtype: str
) -> None:
    # Rows with exactly one target, one real token past the first, full width,
    # a stored width wider than context + 1, a pad id that is not 0 and real
    # tokens equal to it inside the content.
    L, pad = 6, 3
    tok = np.array(
        [
            [7, 8, 3, 3, 3, 3, 3, 3, 3],  # one target (8)
            [7, 8, 9, 9, 9, 9, 9, 9, 9],  # full past context + 1
            [7, 8, 9, 9, 9, 9, 5, 3, 3],  # content ends exactly at column L
            [7, 3, 8, 3, 3, 3, 3, 3, 3],  # a pad-valued token inside the content
            [7, 8, 9, 9, 9, 5, 3, 3, 3],  # content ends one before column L
        ],
        dtype=tok_dtype,
    )
    assert tok.shape[1] == L + 3  # stored width wider than context + 1
    mask = (tok != pad).astype(np.uint8)
    mask[3, 1] = 1  # the inner pad-valued token is a target when a mask says so
    write_row_file(tmp_path / "t.bin", tok)
    write_row_file(tmp_path / "m.npy", mask)
    src = PaddedRows(
        tmp_path / "t.bin",
        tmp_path / "m.npy" if with_mask else None,
        context=L,
        truncate=True,
        pad_side=side,  # type: ignore[arg-type]
        pad_id=pad,
        ignore_index=-100,
        shuffle=False,
    )
    got = src.read(0, np.arange(len(tok), dtype=np.int64))
    for i in range(len(tok)):
        x, y, loss = _by_definition(tok[i], mask[i] if with_mask else None, L, pad, side, -100)
        np.testing.assert_array_equal(got["x"][i], x, err_msg=f"x row {i}")
        np.testing.assert_array_equal(got["y"][i], y, err_msg=f"y row {i}")
        np.testing.assert_array_equal(got["loss_mask"][i], loss, err_msg=f"loss row {i}")


@pytest.mark.parametrize("side", ["right", "left"])
def test_empty_sample_array_gives_empty_batches(tiny: tuple[Path, Path], side: str) -> None:
    for mask in (tiny[1], None):
        src = PaddedRows(tiny[0], mask, context=5, pad_side=side)  # type: ignore[arg-type]
        got = src.read(0, np.zeros(0, np.int64))
        assert {k: (v.shape, v.dtype) for k, v in got.items()} == {
            "x": ((0, 5), np.dtype(np.int32)),
            "y": ((0, 5), np.dtype(np.int32)),
            "loss_mask": ((0, 5), np.dtype(np.bool_)),
        }


def test_int64_edge_sample_numbers(tiny: tuple[Path, Path]) -> None:
    top = np.iinfo(np.int64).max
    samples = np.array([top, top - 1, 0], dtype=np.int64)
    src = PaddedRows(*tiny, context=5)
    rows = src.rows_of(0, samples)
    assert ((rows >= 0) & (rows < 3)).all()
    got = src.read(0, samples)
    np.testing.assert_array_equal(got["x"], src.read(0, samples[::-1].copy())["x"][::-1])
    plain = PaddedRows(*tiny, context=5, shuffle=False)
    np.testing.assert_array_equal(plain.rows_of(0, samples), samples % 3)


@pytest.mark.parametrize("side", ["right", "left"])
def test_tokens_that_do_not_fit_the_output_dtype_raise(tmp_path: Path, side: str) -> None:
    tok = np.array([[5, 6, 7, 0], [40_000, 6, 0, 0], [1, 2, 3, 4]], np.uint16)
    write_row_file(tmp_path / "t.bin", tok)
    src = PaddedRows(
        tmp_path / "t.bin",
        context=3,
        dtype=np.int16,
        shuffle=False,
        pad_side=side,  # type: ignore[arg-type]
    )
    with pytest.raises(DataError, match=r"t\.bin: row 1 holds token 40000, which int16"):
        src.read(0, np.arange(3))
    last = [6, 7, -1] if side == "right" else [-1, 6, 7]
    np.testing.assert_array_equal(src.read(0, np.array([2, 0]))["y"], [[2, 3, 4], last])
    # Tokens wider than the default output: uint64 ids past int64's range.
    write_row_file(tmp_path / "u.npy", np.array([[1, 2, 0], [2**63 + 5, 1, 0]], np.uint64))
    wide = PaddedRows(tmp_path / "u.npy", context=2, shuffle=False)
    assert wide.read(0, np.array([0]))["x"].tolist() == [[1, 2]]
    with pytest.raises(DataError, match=r"u\.npy: row 1 holds token 9223372036854775813"):
        wide.read(0, np.array([0, 1]))


def test_pad_id_must_be_an_integer(tiny: tuple[Path, Path]) -> None:
    # 0.5 "fits" int32's range, but no token ever equals it: padding would be
    # read as content and every pad become a loss target.
    with pytest.raises(ConfigError, match=r"pad_id must be an integer \(got 0\.5\)"):
        PaddedRows(tiny[0], context=5, pad_id=0.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [True, -100.0, -100.5, None, "-100"])
def test_ignore_index_must_be_an_integer(tiny: tuple[Path, Path], bad: object) -> None:
    # True passed the range check and filled every ignored target with 1, a real
    # token id; -100.0 passed it too and failed at the first read, in NumPy's words.
    with pytest.raises(ConfigError, match=r"ignore_index must be an integer \(got "):
        PaddedRows(tiny[0], context=5, ignore_index=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", ["uint16", "float32"])
def test_an_unsigned_output_dtype_is_refused_naming_the_file_and_why(
    tiny: tuple[Path, Path], dtype: str
) -> None:
    # It said only "dtype must be a signed integer type (got uint16)": the dtype of
    # the stored tokens, a user's first guess, with no file named and no reason.
    with pytest.raises(
        ConfigError, match=rf"{tiny[0].name}: dtype={dtype} is refused: .* ignore_index"
    ):
        PaddedRows(tiny[0], context=5, dtype=dtype)


def test_numpy_integer_pad_id_and_ignore_index_are_integers(tiny: tuple[Path, Path]) -> None:
    # A NumPy integer (a tokenizer's ids read from an array) is accepted, and must not
    # reach the fingerprint as one: the Loader's state is JSON (it raised TypeError).
    kw = {"context": 5, "shuffle": False}
    src = PaddedRows(tiny[0], pad_id=np.int64(0), ignore_index=np.int16(-100), **kw)
    ref = PaddedRows(tiny[0], pad_id=0, ignore_index=-100, **kw)
    assert src.fingerprint() == ref.fingerprint()
    with Loader(src, batch_size=2, seed=0) as a, Loader(ref, batch_size=2, seed=0) as b:
        assert batch_digest(islice(a, 3)) == batch_digest(islice(b, 3))
        assert a.state_dict() == b.state_dict()


def test_a_width_below_two_names_what_a_row_needs(tmp_path: Path) -> None:
    write_row_file(tmp_path / "w1.npy", np.array([[1], [2]], np.uint16))
    with pytest.raises(ConfigError, match=r"w1\.npy: stored width 1 .* at least 2 tokens") as e:
        PaddedRows(tmp_path / "w1.npy", context=1)
    assert "context <= 0" not in str(e.value)


def test_raw_big_endian_rows_round_trip(tmp_path: Path) -> None:
    a = np.array([[1, 300, 0], [70, 2, 1]], dtype=">u2")
    write_row_file(tmp_path / "be.bin", a)
    rf = open_row_file(tmp_path / "be.bin")
    assert rf.dtype == np.dtype(">u2")
    got = PaddedRows(rf, context=2, shuffle=False).read(0, np.arange(2))
    np.testing.assert_array_equal(got["x"], [[1, 300], [70, 2]])


def test_bad_sidecar_values_and_zero_width(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"\0" * 40)
    side = tmp_path / "a.bin.json"
    side.write_text(json.dumps({"dtype": "uint16", "width": "abc"}))
    with pytest.raises(FormatError, match=r"a\.bin\.json: width must be a positive integer"):
        open_row_file(tmp_path / "a.bin", width=5)
    side.write_text(json.dumps({"dtype": "nonsense", "width": 5}))
    with pytest.raises(FormatError, match=r"a\.bin\.json: 'nonsense' is not a dtype"):
        open_row_file(tmp_path / "a.bin", dtype="uint16")
    side.write_text(json.dumps({"dtype": "O", "width": 5}))
    with pytest.raises(FormatError, match=r"a\.bin\.json: dtype 'O' \(object\) is not a dtype of"):
        open_row_file(tmp_path / "a.bin")
    side.unlink()
    with pytest.raises(FormatError, match=r"a\.bin: dtype object holds Python objects"):
        open_row_file(tmp_path / "a.bin", dtype="O", width=5)
    np.save(tmp_path / "w0.npy", np.zeros((4, 0), np.uint32))
    with pytest.raises(DataError, match=r"w0\.npy: empty: rows have no columns \(shape \(4, 0\)\)"):
        open_row_file(tmp_path / "w0.npy")


def test_row_files_cut_short_or_with_arguments_they_do_not_take(tmp_path: Path) -> None:
    (tmp_path / "cut.npy").write_bytes(b"\x93NUMPY\x01\x00")  # the magic, then nothing
    with pytest.raises(FormatError, match=r"cut\.npy: truncated: 8 bytes, shorter than an NPY"):
        open_row_file(tmp_path / "cut.npy")
    write_row_file(tmp_path / "r.npy", np.ones((4, 3), np.uint16))
    with pytest.raises(ConfigError, match=r"r\.npy: an \.npy file carries its own dtype and"):
        open_row_file(tmp_path / "r.npy", dtype="uint16")
    with pytest.raises(ConfigError, match=r"flat\.npy: rows must be a 2-D array \(got shape"):
        write_row_file(tmp_path / "flat.npy", np.ones(5, np.uint16))
    assert not (tmp_path / "flat.npy").exists()
    (tmp_path / "a.bin").write_bytes(b"\0" * 40)
    (tmp_path / "a.bin.json").write_text("[1, 2]")
    with pytest.raises(FormatError, match=r"a\.bin\.json: unreadable row sidecar .*found a list"):
        open_row_file(tmp_path / "a.bin")
    (tmp_path / "a.bin.json").unlink()
    (tmp_path / "a.bin.json").mkdir()  # there, but cannot be read
    with pytest.raises(FormatError, match=r"a\.bin\.json: unreadable row sidecar: .*directory"):
        open_row_file(tmp_path / "a.bin")


def test_replacement_independent_of_chunking_and_chained_retries(tmp_path: Path) -> None:
    tp, mp = make_rows(tmp_path, empty_every=2)  # half the rows empty: retries chain
    mask = np.load(mp)
    digests = set()
    for chunk in (1, 3, 8):
        src = PaddedRows(tp, mp, context=64, truncate=True)
        with Loader(src, batch_size=8, seed=2, prefetch=1, chunk_steps=chunk, steps=12) as ld:
            digests.add(batch_digest(list(ld)))
    assert len(digests) == 1
    src = PaddedRows(tp, mp, context=64, truncate=True)
    samples = np.arange(96, dtype=np.int64)
    final = src.final_rows(2, samples)
    first = src.rows_of(2, samples)
    chained = 0
    for i in np.flatnonzero(first != final).tolist():
        tried = [int(retry_rows(2, samples[[i]], a, N_ROWS)[0]) for a in range(1, 9)]
        k = tried.index(int(final[i]))
        assert all(not mask[r, 1:65].any() for r in tried[:k])  # earlier retries were empty
        chained += k > 0
    assert chained > 0  # some replacement row was itself empty and was replaced again


@pytest.mark.parametrize("shuffle", [True, False])
def test_negative_sample_numbers_are_refused(tiny: tuple[Path, Path], shuffle: bool) -> None:
    src = PaddedRows(*tiny, context=5, shuffle=shuffle)
    with pytest.raises(ConfigError, match="sample numbers must be >= 0"):
        src.read(0, np.array([3, -1], dtype=np.int64))


def test_row_reader_makes_one_range_reader_under_concurrent_first_use(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import threading
    import time

    from headrace.formats import _row_file

    made: list[object] = []

    class Slow(RangeReader):
        def __init__(self, *a, **kw) -> None:  # type: ignore[no-untyped-def]
            time.sleep(0.05)  # widen the window two first uses could both enter
            made.append(self)
            super().__init__(*a, **kw)

    monkeypatch.setattr(_row_file, "RangeReader", Slow)
    io = _row_file.RowReader("pread")
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(io.reader)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and all(g is made[0] for g in got)
    io.close()


@pytest.mark.parametrize("side", ["right", "left"])
def test_outputs_are_allocated_once_without_staging_copies(tmp_path: Path, side: str) -> None:
    # NumPy reports its buffers to tracemalloc. A batch's peak is its three outputs, the
    # stored rows read (uint16 tokens + uint8 mask) and two bool temporaries (which
    # positions are real; where targets are ignored). A staging copy of x or y (int32)
    # would add 64 x 1024 x 4 = 256 KiB: far over the 64 KiB allowed for the rest.
    # (Mapped reads: positional reads add the I/O pool's coalescing buffers, which vary.)
    import tracemalloc

    tok, mask = make_rows(tmp_path)
    src = PaddedRows(tok, mask=mask, context=W - 1, pad_side=side, reader="mmap")
    samples = np.arange(64, dtype=np.int64)
    src.read(0, samples)  # plans, handles and pools made once, outside the measurement
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        out = src.read(0, samples)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
        src.close()
    outputs = sum(v.nbytes for v in out.values())
    stored, temps = 64 * W * (2 + 1), 2 * 64 * W
    assert outputs == 64 * (W - 1) * (4 + 4 + 1)
    assert peak <= outputs + stored + temps + 64 * 1024, (peak, outputs, stored, temps)


def test_a_ctrl_c_while_reading_token_and_mask_files_leaves_no_read_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tokens and mask are read at once (the mask on the I/O pool). A KeyboardInterrupt
    # while waiting for the mask must not leave its read running behind close(): it
    # would write into a buffer handed back, or reopen the file of the closed source.
    import threading
    import time

    from headrace.formats import _row_file

    rng = np.random.default_rng(0)
    np.save(tmp_path / "t.npy", rng.integers(1, 100, (64, 17), dtype=np.int32))
    np.save(tmp_path / "m.npy", np.ones((64, 17), dtype=np.uint8))
    src = PaddedRows(tmp_path / "t.npy", tmp_path / "m.npy", context=16)
    src.read(0, np.arange(4))  # open both files
    real_read, real_wait = _row_file.RowReader.read, _row_file.wait_done
    started, done = threading.Event(), threading.Event()

    def slow_mask(self, f, *args, **kwargs):  # type: ignore[no-untyped-def]
        if f.path.endswith("m.npy"):
            started.set()
        else:  # the tokens, in the caller: until the mask's read runs on the pool
            started.wait(5)
        out = real_read(self, f, *args, **kwargs)
        if f.path.endswith("m.npy"):
            time.sleep(0.3)
            done.set()
        return out

    def interrupted(futures):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(_row_file, "wait_done", real_wait)
        raise KeyboardInterrupt  # fault injection: Ctrl-C in the wait

    monkeypatch.setattr(_row_file.RowReader, "read", slow_mask)
    monkeypatch.setattr(_row_file, "wait_done", interrupted)
    with pytest.raises(KeyboardInterrupt):
        src.read(0, np.arange(8))
    assert started.is_set()
    assert done.is_set(), "the mask's read was still running when the interrupt propagated"
    src.close()


def test_context_may_be_a_numpy_integer(tiny: tuple[Path, Path]) -> None:
    # Loader(batch_size=np.int64(...)) is taken; PaddedRows(context=np.int64(5)) was
    # refused as "not a positive integer".
    src = PaddedRows(*tiny, context=np.int64(5), shuffle=False)  # type: ignore[arg-type]
    plain = PaddedRows(*tiny, context=5, shuffle=False)
    assert type(src.context) is int and src.fingerprint() == plain.fingerprint()
    np.testing.assert_array_equal(src.read(0, np.arange(3))["y"], plain.read(0, np.arange(3))["y"])
    for bad in (True, 5.0, np.int64(0)):
        with pytest.raises(ConfigError, match="context must be a positive integer"):
            PaddedRows(*tiny, context=bad)  # type: ignore[arg-type]
    src.close()
    plain.close()


def test_a_token_the_output_dtype_cannot_hold_names_the_file_row_and_token(
    tmp_path: Path,
) -> None:
    write_row_file(tmp_path / "big.npy", np.array([[1, 2, 3], [4, 40_000, 6]], np.uint16))
    src = PaddedRows(tmp_path / "big.npy", context=2, shuffle=False, dtype=np.int16)
    with pytest.raises(DataError, match=r"big\.npy: row 1 holds token 40000, which int16"):
        src.read(0, np.arange(2))


@pytest.mark.parametrize("name", ["r.npy", "r.bin"])
def test_a_failed_rewrite_keeps_the_old_rows_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # write_row_file writes beside the file and renames: a write that fails midway (a
    # full disk) leaves the old rows and sidecar as they were, and no temporary file.
    old = np.arange(8 * 9, dtype=np.uint16).reshape(8, 9)
    write_row_file(tmp_path / name, old)
    before = sorted(p.name for p in tmp_path.iterdir())

    real_open = open

    def full(path: str, mode: str = "r", *args: Any, **kw: Any) -> Any:
        # The temporary files land on /dev/full: every write fails with ENOSPC.
        return real_open("/dev/full", mode) if path.endswith(".tmp") else real_open(path, mode)

    monkeypatch.setattr(_row_file, "open", full, raising=False)
    with pytest.raises(OSError, match="No space left"):
        write_row_file(tmp_path / name, np.ones((16, 9), dtype=np.uint16))
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    got = open_row_file(tmp_path / name)
    assert (got.rows, got.width) == (8, 9)
    assert np.array_equal(
        PaddedRows(tmp_path / name, context=8, shuffle=False).read(0, np.arange(8))["x"], old[:, :8]
    )
