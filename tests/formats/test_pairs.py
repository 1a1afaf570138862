from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _row_files import odirect_works, stored_groups
from headrace.errors import ConfigError, DataError, EmptyRowsError
from headrace.formats import PairRows, write_row_file
from headrace.formats._row_plan import sample_rows
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

N = 200
WIDTHS = {"anchor": 33, "positive": 17, "negative": 65}


def make(root: Path, *, empty_every: int = 0, mask_dtype: str = "uint8") -> dict:
    rng = np.random.default_rng(2)
    files: dict = {}
    for i, (name, w) in enumerate(WIDTHS.items()):
        tok = rng.integers(1, 30_000, (N, w), dtype=np.uint32)
        lengths = rng.integers(1, w + 1, N)
        real = np.arange(w)[None, :] < lengths[:, None]
        tok[~real] = 0
        if empty_every and name == "positive":
            tok[::empty_every] = 0
            real[::empty_every] = False
        write_row_file(root / f"{name}.tok.bin", tok)
        if i < 2:  # the negative has no mask file: its mask is tok != pad_id
            write_row_file(root / f"{name}.mask.npy", real.astype(mask_dtype))
            files[name] = (root / f"{name}.tok.bin", root / f"{name}.mask.npy")
        else:
            files[name] = root / f"{name}.tok.bin"
    return files


def expected(root: Path, rows: np.ndarray) -> dict:
    return stored_groups(root, rows, WIDTHS, N)


@pytest.mark.parametrize("mask_dtype", ["uint8", "bool", "int32"])
@pytest.mark.parametrize("strategy", ["mmap", "pread"])
def test_differing_widths_read_back_exactly(tmp_path: Path, mask_dtype: str, strategy: str) -> None:
    src = PairRows(make(tmp_path, mask_dtype=mask_dtype), reader=strategy)  # type: ignore[arg-type]
    samples = np.array([N - 1, 0, 5, 5, N + 5, 77], dtype=np.int64)
    got = src.read(3, samples)
    want = expected(tmp_path, sample_rows(3, samples, N, True))
    assert set(got) == set(want)
    for k, v in want.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
        assert got[k].dtype == v.dtype
    assert got["anchor_x"].shape == (6, 33) and got["negative_mask"].shape == (6, 65)
    src.close()


def test_samples_per_epoch_is_the_row_count(tmp_path: Path) -> None:
    src = PairRows(make(tmp_path))
    assert src.samples_per_epoch == len(src) == src.members[0].tokens.rows
    src.close()


def test_empty_groups_replaced_independently_of_batch(tmp_path: Path) -> None:
    files = make(tmp_path, empty_every=4)
    src = PairRows(files)
    samples = np.arange(96, dtype=np.int64)
    whole = src.read(1, samples)
    assert all(whole[f"{m}_mask"].any(axis=1).all() for m in WIDTHS)
    alone = [src.read(1, samples[[i]]) for i in (0, 4, 8, 50)]
    for i, part in zip((0, 4, 8, 50), alone, strict=True):
        for k in whole:
            np.testing.assert_array_equal(part[k][0], whole[k][i])
    mm = PairRows(files, reader="mmap")
    assert batch_digest([mm.read(1, samples)]) == batch_digest([whole])


def test_resume_exact(tmp_path: Path) -> None:
    files = make(tmp_path, empty_every=5)
    assert_resume_exact(
        lambda: Loader(PairRows(files), batch_size=8, seed=4, prefetch=0),
        steps=30,
        resume_at=[0, 1, 25, 26],
    )


def test_bad_input(tmp_path: Path) -> None:
    files = make(tmp_path)
    write_row_file(tmp_path / "few.bin", np.ones((N - 1, 9), np.uint32))
    with pytest.raises(DataError, match=r"few\.bin: member 'positive' has 199 rows but .*anchor"):
        PairRows({"anchor": files["anchor"], "positive": tmp_path / "few.bin"})
    write_row_file(tmp_path / "m.npy", np.ones((N, 9), np.uint8))
    with pytest.raises(DataError, match=r"m\.npy: mask shape \(200, 9\) disagrees.*anchor"):
        PairRows({"anchor": (files["anchor"][0], tmp_path / "m.npy")})
    bad = np.ones((N, 33), np.uint8)
    bad[:, 4] = 3
    write_row_file(tmp_path / "bad.npy", bad)
    src = PairRows({"anchor": (files["anchor"][0], tmp_path / "bad.npy")}, shuffle=False)
    with pytest.raises(DataError, match=r"bad\.npy: mask values must be 0 or 1; row 0 holds \[3\]"):
        src.read(0, np.arange(4))
    wide = np.ones((N, 33), np.int32)
    wide[9, 0] = -4
    write_row_file(tmp_path / "wide.npy", wide)
    src = PairRows({"anchor": (files["anchor"][0], tmp_path / "wide.npy")}, shuffle=False)
    with pytest.raises(DataError, match=r"wide\.npy: mask values.*row 9 holds \[-4\]"):
        src.read(0, np.arange(12))
    with pytest.raises(ConfigError, match="at least one member"):
        PairRows({})
    write_row_file(tmp_path / "f.npy", np.ones((N, 9), np.float32))
    with pytest.raises(ConfigError, match=r"f\.npy: token dtype must be an integer type \(found"):
        PairRows({"anchor": tmp_path / "f.npy"})
    write_row_file(tmp_path / "fm.npy", np.ones((N, 33), np.float16))
    with pytest.raises(ConfigError, match=r"fm\.npy: mask dtype must be integer or bool \(found"):
        PairRows({"anchor": (files["anchor"][0], tmp_path / "fm.npy")})
    with pytest.raises(ConfigError, match=r"max_retries must be an integer >= 0 \(got '2'\)"):
        PairRows(files, max_retries="2")  # type: ignore[arg-type]
    all_empty = np.zeros((N, 5), np.uint32)
    write_row_file(tmp_path / "zero.bin", all_empty)
    with pytest.raises(EmptyRowsError, match=r"zero\.bin"):
        PairRows({"a": tmp_path / "zero.bin"}, max_retries=2).read(0, np.arange(3))
    # With several members, the error says which one is empty.
    pair = PairRows({"anchor": files["anchor"], "positive": tmp_path / "zero.bin"}, max_retries=2)
    with pytest.raises(
        EmptyRowsError, match=r"member 'positive' \(.*zero\.bin\) empty in 3\)"
    ) as e:
        pair.read(0, np.arange(3))
    assert "member 'anchor'" not in str(e.value)


def test_pickled_copy_and_empty_samples(tmp_path: Path) -> None:
    import pickle

    files = make(tmp_path, empty_every=3)
    src = PairRows(files, reader="pread")
    samples = np.arange(40, dtype=np.int64) * 7
    first = src.read(5, samples)
    copy = pickle.loads(pickle.dumps(src))
    assert batch_digest([copy.read(5, samples)]) == batch_digest([first])
    empty = src.read(5, np.zeros(0, np.int64))
    assert {k: v.shape for k, v in empty.items()} == {
        f"{m}_{k}": (0, w) for m, w in WIDTHS.items() for k in ("x", "mask")
    }
    copy.close()
    src.close()


def test_negatives_optional_and_members_of_one_column(tmp_path: Path) -> None:
    files = make(tmp_path)
    two = PairRows({"anchor": files["anchor"], "positive": files["positive"]}, shuffle=False)
    got = two.read(0, np.array([0, N - 1, 0]))
    assert set(got) == {"anchor_x", "anchor_mask", "positive_x", "positive_mask"}
    want = expected(tmp_path, np.array([0, N - 1, 0]))
    for k, v in got.items():
        np.testing.assert_array_equal(v, want[k], err_msg=k)
    write_row_file(tmp_path / "one.bin", np.arange(1, N + 1, dtype=np.uint16)[:, None])
    one = PairRows({"a": tmp_path / "one.bin"}, shuffle=False).read(0, np.array([N - 1]))
    assert one["a_x"].tolist() == [[N]] and one["a_mask"].tolist() == [[True]]


def test_pad_id_must_fit_every_member(tmp_path: Path) -> None:
    files = make(tmp_path)
    with pytest.raises(ConfigError, match=r"negative\.tok\.bin: pad_id=-1 does not fit .*uint32"):
        PairRows(files, pad_id=-1)
    with pytest.raises(ConfigError, match=r"pad_id must be an integer \(got 0\.5\)"):
        PairRows(files, pad_id=0.5)  # type: ignore[arg-type]


def test_one_byte_signed_mask_error_shows_the_stored_value(tmp_path: Path) -> None:
    files = make(tmp_path)
    bad = np.ones((N, 33), np.int8)
    bad[3, 2] = -1
    write_row_file(tmp_path / "s.npy", bad)
    src = PairRows({"anchor": (files["anchor"][0], tmp_path / "s.npy")}, shuffle=False)
    with pytest.raises(DataError, match=r"s\.npy: mask values must be 0 or 1; row 3 holds \[-1\]"):
        src.read(0, np.arange(5))


def test_pairs_mix_by_weight_and_refuse_other_widths(tmp_path: Path) -> None:
    from headrace.pipeline import Mixture
    from headrace.pipeline._mixture import source_seed

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = PairRows(make(tmp_path / "a")), PairRows(make(tmp_path / "b", empty_every=9))
    mix = Mixture({"a": a, "b": b}, [0.75, 0.25], batch_size=8)
    with Loader(mix, batch_size=8, seed=3, prefetch=0, steps=40) as ld:
        batches = list(ld)
    got = {k: np.concatenate([x[k] for x in batches]) for k in batches[0]}
    assert set(got) == {"source", *expected(tmp_path / "a", np.arange(1))}
    assert np.isclose(np.mean(got["source"] == 0), 0.75, atol=0.01)
    source, local = mix.plan.locate(3, np.arange(320, dtype=np.int64))
    for s, src in enumerate((a, b)):
        idx = np.flatnonzero(source == s)
        want = src.read(source_seed(3, s), local[idx])  # each group from its own dataset
        for k, v in want.items():
            np.testing.assert_array_equal(got[k][idx], v, err_msg=f"{s} {k}")
    (tmp_path / "c").mkdir()
    narrow = {k: v for k, v in make(tmp_path / "c").items() if k != "negative"}
    with pytest.raises(DataError, match="mixture sources differ in keys"):
        Mixture({"a": a, "c": PairRows(narrow)}, [0.5, 0.5], batch_size=8).read(
            0, np.arange(8, dtype=np.int64)
        )
    a.close()
    b.close()


def test_a_numpy_integer_pad_id_makes_a_loader(tmp_path: Path) -> None:
    write_row_file(tmp_path / "a.npy", np.array([[1, 2, 0], [3, 0, 0]], np.uint16))
    src = PairRows({"anchor": tmp_path / "a.npy"}, pad_id=np.int64(0))
    ref = PairRows({"anchor": tmp_path / "a.npy"}, pad_id=0)
    assert src.fingerprint() == ref.fingerprint()
    with Loader(src, batch_size=2, seed=0) as loader:  # the state is JSON: no NumPy ints
        next(iter(loader))
        assert loader.state_dict()["step"] == 1


@pytest.mark.parametrize("shuffle", [False, "window"])
def test_dtype_gives_tokens_an_embedding_layer_takes(tmp_path: Path, shuffle: object) -> None:
    # uint16 files (a vocabulary under 65,536, as BERT's) gave torch.uint16 tensors,
    # which nn.Embedding refuses; dtype= converts them, checking values that may not fit.
    rng = np.random.default_rng(3)
    a = rng.integers(1, 30_522, (40, 12)).astype(np.uint16)
    a[::5, 6:] = 0
    p = rng.integers(1, 2**32 - 1, (40, 20), dtype=np.uint64).astype(np.uint32)
    p[1, 3] = 2**31 - 1  # fits int32
    write_row_file(tmp_path / "a.bin", a)
    write_row_file(tmp_path / "am.npy", (a != 0).astype(np.uint8))
    write_row_file(tmp_path / "p.npy", p)
    write_row_file(tmp_path / "p32.npy", (p % 2**31).astype(np.uint32))
    kw = {"shuffle": shuffle, **({"window_rows": 7} if shuffle == "window" else {})}
    members = {"anchor": (tmp_path / "a.bin", tmp_path / "am.npy"), "positive": tmp_path / "p.npy"}
    plain = PairRows(members, **kw)  # type: ignore[arg-type]
    wide = PairRows(members, dtype=np.int64, **kw)  # type: ignore[arg-type]
    samples = np.arange(0, 80, 3, dtype=np.int64)
    got, want = wide.read(1, samples), plain.read(1, samples)
    assert wide.fingerprint() != plain.fingerprint()
    assert "dtype" not in plain.fingerprint()  # states saved before dtype= still load
    for k, v in want.items():
        assert got[k].dtype == (np.int64 if k.endswith("_x") else np.bool_)
        assert np.array_equal(got[k], v)
    # A narrower dtype checks the values: uint32 ids past int32 raise, naming file and row.
    narrow = PairRows(members, dtype=np.int32, **kw)  # type: ignore[arg-type]
    with pytest.raises(DataError, match=r"p\.npy: row \d+ holds token \d+, which int32 .* dtype="):
        narrow.read(1, samples)
    fits = PairRows({"positive": tmp_path / "p32.npy"}, dtype=np.int32, **kw)  # type: ignore[arg-type]
    want_fits = (p % 2**31)[fits.rows_of(1, samples)]
    assert np.array_equal(fits.read(1, samples)["positive_x"], want_fits)
    with pytest.raises(ConfigError, match=r"dtype must be an integer type \(got float32\)"):
        PairRows(members, dtype=np.float32)
    with pytest.raises(ConfigError, match=r"pad_id=40000 does not fit the output dtype int16"):
        PairRows({"positive": tmp_path / "p.npy"}, dtype=np.int16, pad_id=40000)
    # Members with masks never compare with pad_id: any pad_id goes.
    PairRows({"anchor": members["anchor"]}, dtype=np.int16, pad_id=40000).close()
    for s in (plain, wide, narrow, fits):
        s.close()


def test_a_mixture_of_other_negative_counts_or_dtypes_is_refused_saying_how_to_mix(
    tmp_path: Path,
) -> None:
    # A retrieval run mixing a dataset of 1 hard negative with one of 7 (or of uint16
    # anchors with int32 ones) is refused before the first batch, with the way out.
    from headrace.pipeline import Mixture

    files = make(tmp_path)
    for i in range(7):
        write_row_file(tmp_path / f"neg{i}.bin", np.full((N, 65), i + 1, np.uint32))
    one = PairRows({**files, "negative0": files["negative"]})
    seven = PairRows({**files, **{f"negative{i}": tmp_path / f"neg{i}.bin" for i in range(7)}})
    with pytest.raises(
        DataError,
        match=r"differ in keys: .*only in 'seven': \['negative1_mask', .*'negative6_x'\]"
        r".*Mapped\(source, fn\)",
    ):
        Mixture({"one": one, "seven": seven}, [0.5, 0.5], batch_size=8).read(
            0, np.arange(8, dtype=np.int64)
        )
    narrow = {**files, "anchor": tmp_path / "neg0.bin"}
    write_row_file(tmp_path / "a16.bin", np.ones((N, 33), np.uint16))
    u16 = PairRows({**files, "anchor": tmp_path / "a16.bin"})
    with pytest.raises(DataError, match=r"differ in dtype: .*anchor_x: uint16.*same dtype="):
        Mixture({"u32": PairRows(files), "u16": u16}, [0.5, 0.5], batch_size=8).read(
            0, np.arange(8, dtype=np.int64)
        )
    with pytest.raises(DataError, match=r"differ in per-sample shape: .*Mapped\(source, fn\)"):
        Mixture({"a": PairRows(files), "n": PairRows(narrow)}, [0.5, 0.5], batch_size=8).read(
            0, np.arange(8, dtype=np.int64)
        )
    same = Mixture(
        {
            "u32": PairRows(files, dtype=np.int64),
            "u16": PairRows({**files, "anchor": tmp_path / "a16.bin"}, dtype=np.int64),
        },
        [0.5, 0.5],
        batch_size=8,
    )
    assert same.read(0, np.arange(8, dtype=np.int64))["anchor_x"].dtype == np.int64


def retrieval_groups(root: Path) -> dict:
    """Anchors of 65 uint16 tokens, documents of 513 (int32 positives, 7 int64
    negatives); some groups have an empty anchor, positive or negative."""
    rng = np.random.default_rng(9)
    members: dict = {}
    specs = [("anchor", 65, np.uint16), ("positive", 513, np.int32)]
    specs += [(f"negative{i}", 513, np.int64) for i in range(7)]
    for j, (name, w, dt) in enumerate(specs):
        tok = rng.integers(1, 60_000, (N, w)).astype(dt)
        lengths = rng.integers(1, w + 1, N)
        lengths[j :: 11 + j] = 0  # each member empty in its own groups
        tok[np.arange(w)[None, :] >= lengths[:, None]] = 0
        write_row_file(root / f"{name}.tok.bin", tok)
        write_row_file(root / f"{name}.mask.npy", (tok != 0).astype(np.uint8))
        members[name] = (root / f"{name}.tok.bin", root / f"{name}.mask.npy")
    return members


@pytest.mark.parametrize("shuffle", [True, "window"])
def test_seven_negatives_same_groups_on_every_strategy_host_count_and_resume(
    tmp_path: Path, shuffle: object
) -> None:
    members = retrieval_groups(tmp_path)
    kw: dict = {"shuffle": shuffle, "window_rows": 48 if shuffle == "window" else None}
    steps = 20

    def run(world: int, strategy: str = "adaptive", state: dict | None = None) -> list[dict]:
        loaders = []
        for r in range(world):
            src = PairRows(members, dtype=np.int64, reader=strategy, **kw)  # type: ignore[arg-type]
            ld = Loader(src, batch_size=16, seed=5, rank=r, world_size=world, steps=steps)
            if state is not None:
                ld.load_state_dict(state)
            loaders.append(ld)
        out = []
        for parts in zip(*loaders, strict=True):
            out.append({k: np.concatenate([p[k] for p in parts]) for k in parts[0]})
        for ld in loaders:
            ld.close()
        return out

    want = run(1)
    assert len(want) == steps and want[0]["negative6_x"].shape == (16, 513)
    assert want[0]["anchor_x"].shape == (16, 65) and want[0]["anchor_x"].dtype == np.int64
    for b in want:  # every group has a real token in every member: empty ones were replaced
        assert all(b[f"{m}_mask"].any(axis=1).all() for m in members)
    digest = batch_digest(want)
    for strategy in ("mmap", "pread", "odirect"):
        if strategy == "odirect" and not odirect_works(tmp_path / "anchor.mask.npy"):
            continue
        assert batch_digest(run(1, strategy)) == digest, strategy
    for world in (2, 4):
        assert batch_digest(run(world)) == digest, world
    src = PairRows(members, dtype=np.int64, **kw)
    with Loader(src, batch_size=16, seed=5, rank=1, world_size=4, steps=steps) as ld:
        for _, _ in zip(range(7), ld, strict=False):
            pass
        state = ld.state_dict()
    assert batch_digest(run(2, state=state)) == batch_digest(want[7:])
