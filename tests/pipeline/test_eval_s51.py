"""An evaluation during training, as a user writes it: per-sample losses of a tiny fixed
model summed over the valid rows of an exact pass (``epochs=1``) and counted, on 1-3
hosts, against the same losses computed with NumPy over every sample read straight from
the files (token ``val.bin``, padded rows with ``ignore_index``, a Parquet table, a
folder of NPY files; none of their sizes a multiple of batch x hosts).

And an evaluation broken off (Lightning's sanity check takes 2 batches of the val loader
before training; ``limit_val_batches``; an exception in the loop): the next evaluation
of the same loader is still the whole pass. It went on from the step the broken loop had
reached, so the first real validation after a sanity check left out its first
``2 * batch_size`` samples, with no word (77 of 101 rows counted).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.formats import FileSource, PaddedRows, TableSource, TokenSource
from headrace.pipeline import Loader

L = 16
B = 12
IGNORE = -100
_W = np.random.default_rng(42)
EMBED, OUT, CLASSES = (
    _W.standard_normal((50, 8)),
    _W.standard_normal((8, 50)),
    _W.standard_normal((8, 3)),
)


def _lse(z: np.ndarray) -> np.ndarray:
    m = z.max(-1, keepdims=True)
    return (m + np.log(np.exp(z - m).sum(-1, keepdims=True)))[..., 0]


def _lm(x: np.ndarray, y: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's summed cross-entropy over its targets, and their count."""
    z = EMBED[x.astype(np.int64)] @ OUT
    label = np.where(target, y, 0).astype(np.int64)
    ce = _lse(z) - np.take_along_axis(z, label[..., None], -1)[..., 0]
    return np.where(target, ce, 0.0).sum(1), target.sum(1).astype(np.float64)


def _cls(features: np.ndarray, label: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z = features @ CLASSES
    return _lse(z) - z[np.arange(len(z)), label.astype(np.int64)], np.ones(len(z))


def losses(kind: str, b: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The model's (loss, count) a row, for a batch of ``kind``."""
    if kind == "tokens":
        return _lm(b["x"], b["y"], np.ones(b["x"].shape, bool))
    if kind == "rows":
        assert ((b["y"] == IGNORE) == ~b["loss_mask"]).all()  # ignore_index where no target
        return _lm(b["x"], b["y"], b["loss_mask"])
    if kind == "table":
        m = b["ids_mask"]
        pooled = (EMBED[b["ids"]] * m[..., None]).sum(1) / m.sum(1, keepdims=True)
        return _cls(pooled, b["label"])
    return _cls(b["data"].astype(np.float64), b["label"])


def write(root: Path) -> Path:
    """The user's files under ``root``: none holds a multiple of 12, 24 or 36 samples."""
    rng = np.random.default_rng(0)
    rng.integers(0, 50, 10_007, dtype=np.uint16).tofile(root / "val.bin")  # 625 windows
    lengths = rng.integers(0, 25, 101)
    lengths[5:7] = (0, 1)  # rows with no target: kept, counted as 0 tokens
    tok = rng.integers(1, 50, (101, 24), dtype=np.uint16)
    tok[np.arange(24) >= lengths[:, None]] = 0
    np.save(root / "rows.npy", tok)
    for i in range(53):
        folder = root / "npy" / f"c{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / f"{i:03d}.npy", rng.standard_normal(8).astype(np.float32))
    ids = [rng.integers(1, 50, rng.integers(1, 10)).tolist() for _ in range(77)]
    table = pa.table({"ids": ids, "label": rng.integers(0, 3, 77)})
    pq.write_table(table, root / "t.parquet", row_group_size=20)
    return root


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("eval"))


def sources(root: Path) -> dict[str, Callable[[], Any]]:
    return {
        "tokens": lambda: TokenSource(root / "val.bin", context=L, shuffle=False),
        "rows": lambda: PaddedRows(
            root / "rows.npy",
            context=L,
            truncate=True,
            shuffle=False,
            empty_rows="keep",
            ignore_index=IGNORE,
        ),
        "table": lambda: TableSource(root / "t.parquet", width=10, shuffle=False),
        "npy": lambda: FileSource(root / "npy", format="npy", shuffle=False, labels="folders"),
    }


def reference(root: Path, kind: str) -> tuple[float, float, int]:
    """(loss sum, count, n) over every sample, read with NumPy/pyarrow, not headrace."""
    if kind == "tokens":
        t = np.fromfile(root / "val.bin", np.uint16)
        at = np.arange((len(t) - 1) // L)[:, None] * L + np.arange(L)
        s, c = losses(kind, {"x": t[at], "y": t[at + 1]})
    elif kind == "rows":
        r = np.load(root / "rows.npy").astype(np.int64)[:, : L + 1]
        y = np.where(r[:, 1:] != 0, r[:, 1:], IGNORE)
        s, c = losses(kind, {"x": r[:, :L], "y": y, "loss_mask": r[:, 1:] != 0})
    elif kind == "table":
        rows = pq.read_table(root / "t.parquet").to_pydict()
        ids = np.zeros((len(rows["ids"]), 10), np.int64)
        for i, v in enumerate(rows["ids"]):
            ids[i, : len(v)] = v
        b = {"ids": ids, "ids_mask": ids != 0, "label": np.array(rows["label"])}
        s, c = losses(kind, b)
    else:
        files = sorted((root / "npy").rglob("*.npy"))
        features = np.stack([np.load(f) for f in files]).astype(np.float64)
        s, c = losses(
            kind, {"data": features, "label": np.array([int(f.parent.name[1:]) for f in files])}
        )
    return float(s.sum()), float(c.sum()), len(s)


def evaluate(batches: Any, kind: str) -> tuple[float, float, list[int]]:
    """The README's loop: sum and count over the valid rows (and which samples they were)."""
    total, count, seen = 0.0, 0.0, []
    for b in batches:
        s, c = losses(kind, b)
        ok = b["valid"]
        total, count = total + s[ok].sum(), count + c[ok].sum()
        seen += b["sample"][ok].tolist()
    return total, count, seen


@pytest.mark.parametrize("kind", ["tokens", "rows", "table", "npy"])
def test_reduced_metric_is_the_numpy_one_on_1_to_3_hosts(data: Path, kind: str) -> None:
    want_sum, want_count, n = reference(data, kind)
    assert n % B and all(n % (B * w) for w in (2, 3))  # a partial last step on every count
    for world in (1, 2, 3):
        total, count, seen = 0.0, 0.0, []
        for rank in range(world):
            with Loader(
                sources(data)[kind](), batch_size=B, epochs=1, rank=rank, world_size=world
            ) as lo:
                t, c, s = evaluate(lo, kind)
            total, count, seen = total + t, count + c, seen + s
        assert sorted(seen) == list(range(n)), (kind, world)
        assert count == want_count, (kind, world)
        assert total == pytest.approx(want_sum, rel=1e-12), (kind, world)


def test_plain_mean_over_the_last_batch_counts_the_filler_rows(data: Path) -> None:
    """Why the loop masks: the rows that fill the last step are the pass's first
    samples again (valid False), so an unmasked mean counts them twice."""
    with Loader(sources(data)["tokens"](), batch_size=B, epochs=1) as lo:
        last = list(lo)[-1]
    assert (
        last["sample"].tolist() == list(range(624, 636)) and last["valid"].sum() == 1
    )  # 625 = 52 * 12 + 1


@pytest.mark.parametrize("kind", ["tokens", "rows"])
def test_an_evaluation_broken_off_leaves_the_next_one_whole(data: Path, kind: str) -> None:
    """A sanity check of 2 batches, then the real validation of the same loader."""
    want_sum, want_count, n = reference(data, kind)
    with Loader(sources(data)[kind](), batch_size=B, epochs=1) as val:
        for i, _ in enumerate(val):
            if i == 1:
                break
        assert len(val) == -(-n // B)  # what the next iteration yields: the whole pass
        total, count, seen = evaluate(val, kind)
        assert sorted(seen) == list(range(n))
        assert count == want_count and total == pytest.approx(want_sum, rel=1e-12)
        # An iterator left unfinished and a new one begun (no break statement): the same.
        it = iter(val)
        next(it)
        assert sorted(evaluate(val, kind)[2]) == list(range(n))


def test_a_pass_interrupted_goes_on_from_its_saved_state(data: Path) -> None:
    """A state saved mid-pass (preempted during an evaluation) resumes that pass, on
    another host count too, in a new loader or the same one: each sample once."""
    n = reference(data, "rows")[2]
    with Loader(sources(data)["rows"](), batch_size=B, epochs=1) as val:
        it = iter(val)
        first = evaluate([next(it) for _ in range(3)], "rows")[2]
        state = val.state_dict()
        val.load_state_dict(state)  # the same loader, loaded: goes on from step 3
        assert len(val) == -(-n // B) - 3
        assert sorted(first + evaluate(val, "rows")[2]) == list(range(n))
    rest: list[int] = []
    for rank in range(3):
        with Loader(sources(data)["rows"](), batch_size=B, epochs=1, rank=rank, world_size=3) as lo:
            lo.load_state_dict(state)
            rest += evaluate(lo, "rows")[2]
    assert sorted(first + rest) == list(range(n))
