"""Contrastive groups with 0 to 7 hard negatives: ``PairRows(..., optional=...)``.

A retrieval dataset stores 7 negative members; a query with k real negatives has
all-padding rows in the other 7 - k. Those groups must be read (their missing
negatives' masks all False), and only a group whose anchor or positive is empty
replaced, the same way on every strategy, host count and resume.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _row_files import odirect_works, stored_groups
from headrace.errors import ConfigError, EmptyRowsError, StateError
from headrace.formats import PairRows, write_row_file
from headrace.formats._row_plan import sample_rows
from headrace.pipeline import Loader, Mixture
from headrace.plan import retry_rows
from headrace.testing import assert_resume_exact, batch_digest

N = 240
K = 7
NEGS = tuple(f"negative{i}" for i in range(K))
WIDTHS = {"anchor": 17, "positive": 40, **dict.fromkeys(NEGS, 40)}
OPTIONAL = NEGS


def retrieval(root: Path, *, seven: bool = False) -> tuple[dict, np.ndarray, np.ndarray]:
    """Groups with ``count[i]`` real negatives (0..7, each count many times; all 7 if
    ``seven``), stored first; an empty anchor (even groups) or positive (odd ones) in
    the groups ``bad`` says. Even negatives have a mask file (a missing one's mask row
    all 0), odd ones none (mask = x != 0)."""
    rng = np.random.default_rng(11)
    count = np.arange(N) % (K + 1)
    rng.shuffle(count)
    if seven:
        count[:] = K
    bad = np.zeros(N, dtype=bool)
    bad[rng.choice(N, 30, replace=False)] = True
    members: dict = {}
    for name, w in WIDTHS.items():
        tok = rng.integers(1, 50_000, (N, w)).astype(np.uint32)
        lengths = rng.integers(1, w + 1, N)
        if name.startswith("negative"):
            lengths[count <= int(name.removeprefix("negative"))] = 0
        else:
            lengths[bad & (np.arange(N) % 2 == (name == "positive"))] = 0
        tok[np.arange(w)[None, :] >= lengths[:, None]] = 0
        write_row_file(root / f"{name}.tok.bin", tok)
        odd_negative = name.startswith("negative") and int(name[-1]) % 2
        if odd_negative:
            members[name] = root / f"{name}.tok.bin"
        else:
            write_row_file(root / f"{name}.mask.npy", (tok != 0).astype(np.uint8))
            members[name] = (root / f"{name}.tok.bin", root / f"{name}.mask.npy")
    return members, count, bad


def stored(root: Path, rows: np.ndarray) -> dict:
    return stored_groups(root, rows, WIDTHS, N)


def expected_rows(seed: int, samples: np.ndarray, bad: np.ndarray, shuffle: bool) -> np.ndarray:
    """Each sample's row, its replacements drawn until a row is not ``bad``."""
    rows = sample_rows(seed, samples, N, shuffle)
    for i, s in enumerate(samples.tolist()):
        attempt = 0
        while bad[rows[i]]:
            attempt += 1
            rows[i] = retry_rows(seed, np.array([s]), attempt, N)[0]
    return rows


@pytest.mark.parametrize("shuffle", [False, True])
def test_groups_with_0_to_7_negatives_are_kept_and_only_empty_required_ones_replaced(
    tmp_path: Path, shuffle: bool
) -> None:
    members, count, bad = retrieval(tmp_path)
    assert bad.any() and set(count[~bad].tolist()) == set(range(K + 1))
    src = PairRows(members, optional=OPTIONAL, shuffle=shuffle)
    samples = np.arange(2 * N, dtype=np.int64)  # two epochs
    got = src.read(3, samples)
    rows = expected_rows(3, samples, bad, shuffle)
    want = stored(tmp_path, rows)
    for k, v in want.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    # Every group the plan chose is kept unless its anchor or positive is empty.
    plan = sample_rows(3, samples, N, shuffle)
    np.testing.assert_array_equal(rows == plan, ~bad[plan])
    assert (rows != plan).sum() == 2 * bad.sum()
    # The masks say how many negatives each group has: negatives 0..count-1.
    present = np.stack([got[f"{m}_mask"].any(axis=1) for m in NEGS], axis=1)
    np.testing.assert_array_equal(present.sum(axis=1), count[rows])
    np.testing.assert_array_equal(present, np.arange(K)[None, :] < count[rows][:, None])
    assert np.bincount(count[rows], minlength=K + 1).min() > 0
    # Without optional=, only groups with all 7 negatives survive: the skew this fixes.
    # (A group has all 7 in 1 of 8 cases: it takes many replacements.)
    strict = PairRows(members, shuffle=shuffle, max_retries=200).read(3, samples)
    kept = np.stack([strict[f"{m}_mask"].any(axis=1) for m in NEGS], axis=1).sum(axis=1)
    assert (kept == K).all()
    src.close()


def test_a_group_is_read_whole_whatever_the_batch(tmp_path: Path) -> None:
    members, _, _ = retrieval(tmp_path)
    src = PairRows(members, optional=OPTIONAL)
    samples = np.arange(N, dtype=np.int64)
    whole = src.read(2, samples)
    for i in (0, 7, 100, N - 1):
        part = src.read(2, samples[[i]])
        for k in whole:
            np.testing.assert_array_equal(part[k][0], whole[k][i], err_msg=f"{i} {k}")
    src.close()


def test_each_replacement_round_reads_every_members_files_once(tmp_path: Path) -> None:
    from headrace.io import RangeReader

    members, _, bad = retrieval(tmp_path)
    files = sum(2 if isinstance(spec, tuple) else 1 for spec in members.values())
    samples = np.arange(96, dtype=np.int64)
    with RangeReader("pread") as reader:
        src = PairRows(members, optional=OPTIONAL, reader=reader)
        before = reader.stats.reads
        src.read(0, samples)
        reads = reader.stats.reads - before
        src.close()
    # Rounds: the most replacements any one sample needed (a row is bad or not).
    rows = sample_rows(0, samples, N, True)
    rounds = 0
    for i in np.flatnonzero(bad[rows]).tolist():
        a = 1
        while bad[retry_rows(0, samples[[i]], a, N)[0]]:
            a += 1
        rounds = max(rounds, a)
    assert rounds >= 1
    assert reads == files * (1 + rounds)  # 15 files: the first read and one per round


@pytest.mark.parametrize("shuffle", [True, "window"])
def test_same_groups_on_every_strategy_and_host_count_and_after_resume(
    tmp_path: Path, shuffle: object
) -> None:
    members, count, bad = retrieval(tmp_path)
    kw: dict = {"shuffle": shuffle, "window_rows": 50 if shuffle == "window" else None}
    steps = 24

    def run(world: int, strategy: str = "adaptive", state: dict | None = None) -> list[dict]:
        loaders = []
        for r in range(world):
            src = PairRows(members, optional=OPTIONAL, reader=strategy, **kw)  # type: ignore[arg-type]
            ld = Loader(src, batch_size=16, seed=6, rank=r, world_size=world, steps=steps)
            if state is not None:
                ld.load_state_dict(state)
            loaders.append(ld)
        out = [
            {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            for parts in zip(*loaders, strict=True)
        ]
        for ld in loaders:
            ld.close()
        return out

    want = run(1)
    assert len(want) == steps
    positive = np.concatenate([b["positive_x"] for b in want])
    tok = np.fromfile(tmp_path / "positive.tok.bin", dtype=np.uint32).reshape(N, -1)
    # Recover each yielded group's row by its positive (random tokens: unique rows).
    lookup = {r.tobytes(): i for i, r in enumerate(tok)}
    rows = np.array([lookup[a.tobytes()] for a in positive])
    assert not bad[rows].any()
    assert set(count[rows].tolist()) == set(range(K + 1))  # groups of 0..7 negatives read
    digest = batch_digest(want)
    for strategy in ("mmap", "pread", "odirect"):
        if strategy == "odirect" and not odirect_works(tmp_path / "anchor.mask.npy"):
            continue
        assert batch_digest(run(1, strategy)) == digest, strategy
    for world in (2, 4):
        assert batch_digest(run(world)) == digest, world
    src = PairRows(members, optional=OPTIONAL, **kw)
    with Loader(src, batch_size=16, seed=6, rank=3, world_size=4, steps=steps) as ld:
        for _, _ in zip(range(9), ld, strict=False):
            pass
        state = ld.state_dict()
    assert batch_digest(run(2, state=state)) == batch_digest(want[9:])
    assert_resume_exact(
        lambda: Loader(PairRows(members, optional=OPTIONAL, **kw), batch_size=16, seed=6),
        steps=steps,
        resume_at=[0, 1, 14, 15],
    )


def test_optional_members_enter_the_fingerprint(tmp_path: Path) -> None:
    members, _, _ = retrieval(tmp_path)
    plain = PairRows(members)
    assert "optional" not in plain.fingerprint()  # states saved before optional= still load
    some = PairRows(members, optional=NEGS[1:])
    listed = PairRows(members, optional=[*reversed(NEGS[1:]), "negative3"])
    assert some.fingerprint()["optional"] == list(NEGS[1:])
    assert listed.fingerprint() == some.fingerprint()  # order and repeats do not matter
    assert "optional=['negative1'" in repr(some)
    with Loader(some, batch_size=8, seed=1) as ld:
        next(iter(ld))
        state = ld.state_dict()
    for other in (PairRows(members, optional=NEGS), plain):
        with (
            Loader(other, batch_size=8, seed=1) as ld,
            pytest.raises(StateError, match=r"what differs: optional"),
        ):
            ld.load_state_dict(state)
    with Loader(listed, batch_size=8, seed=1) as ld:
        ld.load_state_dict(state)
        assert ld.state_dict()["step"] == 1
    for s in (plain, some, listed):
        s.close()


def test_bad_optional_names_are_refused_naming_them(tmp_path: Path) -> None:
    members, _, _ = retrieval(tmp_path)
    with pytest.raises(
        ConfigError, match=r"optional names \['neg0', 'positve'\], which are not members; "
    ) as e:
        PairRows(members, optional=("neg0", "negative1", "positve"))
    assert "'anchor', 'positive', 'negative0'" in str(e.value)
    with pytest.raises(
        ConfigError, match=r"optional names every member \(\['anchor', 'positive', 'negative0'"
    ):
        PairRows(members, optional=list(members))
    with pytest.raises(
        ConfigError,
        match=r"optional must be a collection of member names \(got 'negative0'\); "
        r"write optional=\('negative0',\)",
    ):
        PairRows(members, optional="negative0")
    with pytest.raises(ConfigError, match=r"optional must be a collection .* \(got 3\)\.$"):
        PairRows(members, optional=3)  # type: ignore[arg-type]


def test_only_required_members_explain_a_failed_replacement(tmp_path: Path) -> None:
    write_row_file(tmp_path / "a.bin", np.arange(1, 41, dtype=np.uint16).reshape(20, 2))
    write_row_file(tmp_path / "zero.bin", np.zeros((20, 3), np.uint16))
    # An optional member that is empty everywhere replaces nothing.
    src = PairRows(
        {"anchor": tmp_path / "a.bin", "negative": tmp_path / "zero.bin"}, optional=["negative"]
    )
    got = src.read(0, np.arange(20))
    assert got["anchor_mask"].all() and not got["negative_mask"].any()
    assert (got["negative_x"] == 0).all()
    # An empty required member still raises after max_retries, naming it and not the other.
    both = PairRows(
        {
            "anchor": tmp_path / "zero.bin",
            "positive": tmp_path / "a.bin",
            "negative": tmp_path / "zero.bin",
        },
        optional=["negative"],
        max_retries=3,
    )
    with pytest.raises(
        EmptyRowsError,
        match=r"after 3 replacement\(s\).*member 'anchor' \(.*zero\.bin\) empty in 4",
    ) as e:
        both.read(0, np.arange(4))
    assert "member 'negative'" not in str(e.value)
    src.close()
    both.close()


def test_a_mixture_with_a_pair_source_of_all_seven_negatives(tmp_path: Path) -> None:
    # Same keys and widths: a source with optional negatives mixes with one without.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    members_a, count_a, bad_a = retrieval(tmp_path / "a")
    members_b, _, _ = retrieval(tmp_path / "b", seven=True)
    a = PairRows(members_a, optional=OPTIONAL)
    b = PairRows(members_b)  # every group has all 7 negatives, or is replaced
    mix = Mixture({"a": a, "b": b}, [0.5, 0.5], batch_size=16)
    with Loader(mix, batch_size=16, seed=2, prefetch=0, steps=20) as ld:
        batches = list(ld)
    got = {k: np.concatenate([x[k] for x in batches]) for k in batches[0]}
    present = np.stack([got[f"{m}_mask"].any(axis=1) for m in NEGS], axis=1).sum(axis=1)
    from_a = got["source"] == 0
    assert (present[~from_a] == K).all()
    assert set(present[from_a].tolist()) == set(range(K + 1))
    from headrace.pipeline._mixture import source_seed

    source, local = mix.plan.locate(2, np.arange(320, dtype=np.int64))
    for s, (src, root) in enumerate(((a, tmp_path / "a"), (b, tmp_path / "b"))):
        idx = np.flatnonzero(source == s)
        want = src.read(source_seed(2, s), local[idx])
        for k, v in want.items():
            np.testing.assert_array_equal(got[k][idx], v, err_msg=f"{s} {k}")
        if s == 0:  # and those are the files' groups, replaced only for an empty anchor
            rows = expected_rows(source_seed(2, 0), local[idx], bad_a, True)
            for k, v in stored(root, rows).items():
                np.testing.assert_array_equal(got[k][idx], v, err_msg=k)
            np.testing.assert_array_equal(present[idx], count_a[rows])
    a.close()
    b.close()


def test_masks_let_a_loss_use_only_the_negatives_a_group_has(tmp_path: Path) -> None:
    # An InfoNCE-style loss over mean-pooled embeddings, in NumPy: with the negatives'
    # masks as the score mask, it equals the loss computed group by group over only
    # the negatives that group stores.
    members, count, bad = retrieval(tmp_path)
    src = PairRows(members, optional=OPTIONAL, dtype=np.int64)
    batch = src.read(4, np.arange(64, dtype=np.int64))
    table = np.random.default_rng(0).normal(size=(50_000, 8))

    def embed(m: str) -> np.ndarray:
        x, mask = batch[f"{m}_x"], batch[f"{m}_mask"]
        s = (table[x] * mask[..., None]).sum(axis=1)
        return s / np.maximum(mask.sum(axis=1, keepdims=True), 1)

    q, p = embed("anchor"), embed("positive")
    negs = np.stack([embed(m) for m in NEGS], axis=1)  # (B, 7, 8)
    exists = np.stack([batch[f"{m}_mask"].any(axis=1) for m in NEGS], axis=1)
    scores = np.concatenate([(q * p).sum(-1)[:, None], np.einsum("bd,bkd->bk", q, negs)], axis=1)
    scores[:, 1:][~exists] = -np.inf  # a missing negative adds exp(-inf) = 0
    batched = -scores[:, 0] + np.log(np.exp(scores).sum(axis=1))
    assert set(exists.sum(axis=1).tolist()) == set(range(K + 1))
    rows = expected_rows(4, np.arange(64, dtype=np.int64), bad, True)
    for i in range(64):
        n = count[rows[i]]
        own = np.array([q[i] @ p[i]] + [q[i] @ negs[i, j] for j in range(n)])
        assert np.isclose(batched[i], -own[0] + np.log(np.exp(own).sum()))
    # Without the masks, padding rows would score as zero-vector negatives.
    dense = -scores[:, 0] + np.log(np.exp(np.where(np.isinf(scores), 0, scores)).sum(axis=1))
    assert not np.allclose(dense, batched)
    src.close()
