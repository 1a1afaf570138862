"""An SFT mixture: padded rows beside a Hugging Face tokenized dataset.

The rows are a uint16 token file and a loss mask, some rows all padding (replaced);
the dataset is ``datasets.save_to_disk`` of an ``input_ids`` list column, padded
at batch time and mapped to the rows' ``x``/``y``/``loss_mask`` layout. Both are
left-padded with ignore index -100. Every sample is checked against a hand-made
expectation of its source, and the global batches against other host counts and
a resume on another one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.formats import PaddedRows, TableSource, write_row_file
from headrace.pipeline import Loader, Mapped, Mixture
from headrace.testing import batch_digest

datasets = pytest.importorskip("datasets")

CONTEXT, ROWS, DOCS, B, STEPS = 32, 120, 90, 16, 24
IGNORE = -100


def as_rows(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """A left-padded ``input_ids`` batch as the rows' outputs (module level: picklable)."""
    ids, real = arrays["input_ids"], arrays["input_ids_mask"]
    # The first real token's target is predicted from padding: not a target, as in
    # PaddedRows(pad_side="left").
    loss = real[:, 1:] & real[:, :-1]
    y = ids[:, 1:].astype(np.int64)
    y[~loss] = IGNORE
    return {"x": ids[:, :-1].astype(np.int64), "y": y, "loss_mask": loss}


def left_padded(x: np.ndarray, y: np.ndarray, loss: np.ndarray) -> tuple[bytes, bytes, bytes]:
    """One row's outputs, right-aligned by hand: (x, y, loss_mask) of width CONTEXT."""
    k = len(x)
    out_x = np.zeros(CONTEXT, np.int64)
    out_y = np.full(CONTEXT, IGNORE, np.int64)
    out_l = np.zeros(CONTEXT, bool)
    out_x[CONTEXT - k :] = x
    out_y[CONTEXT - k :] = np.where(loss, y.astype(np.int64), IGNORE)
    out_l[CONTEXT - k :] = loss
    return out_x.tobytes(), out_y.tobytes(), out_l.tobytes()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("sft")
    rng = np.random.default_rng(5)
    width = CONTEXT + 9  # stored wider than context + 1: the first 33 columns are read
    tok = np.zeros((ROWS, width), np.uint16)
    mask = np.zeros((ROWS, width), np.uint8)
    want_rows = set()
    for i in range(ROWS):
        k = int(rng.integers(2, CONTEXT + 2))  # content length, up to context + 1
        prompt = int(rng.integers(1, k))  # prompt tokens are content but not targets
        tok[i, :k] = rng.integers(1, 60_000, k)
        mask[i, prompt:k] = 1
        if i % 7 == 3:
            mask[i] = 0  # no target at all: must be replaced
            continue
        want_rows.add(left_padded(tok[i, : k - 1], tok[i, 1:k], mask[i, 1:k] != 0))
    write_row_file(root / "tok.bin", tok)
    write_row_file(root / "mask.npy", mask)
    docs = [rng.integers(1, 200_000, int(rng.integers(2, 60))).tolist() for _ in range(DOCS)]
    datasets.Dataset.from_dict({"input_ids": docs}).save_to_disk(str(root / "hf"))
    want_docs = set()
    for d in docs:
        kept = np.array(d[: CONTEXT + 1])  # truncate=True keeps each list's first items
        loss = np.ones(len(kept) - 1, bool)
        want_docs.add(left_padded(kept[:-1], kept[1:], loss))
    return {"root": root, "rows": want_rows, "docs": want_docs}


def mixture(root: Path) -> Mixture:
    rows = PaddedRows(
        root / "tok.bin",
        root / "mask.npy",
        context=CONTEXT,
        pad_side="left",
        ignore_index=IGNORE,
        dtype=np.int64,
    )
    table = TableSource(
        root / "hf", columns=["input_ids"], width=CONTEXT + 1, truncate=True, pad_side="left"
    )
    return Mixture({"rows": rows, "hf": Mapped(table, as_rows)}, [0.75, 0.25], batch_size=B)


def global_batches(root: Path, world: int, start: int = 0, state: Any = None) -> list[dict]:
    loaders = [
        Loader(mixture(root), batch_size=B, seed=11, rank=r, world_size=world, steps=STEPS)
        for r in range(world)
    ]
    if state is not None:
        for ld in loaders:
            ld.load_state_dict(state)
    its = [iter(ld) for ld in loaders]
    out = []
    for _ in range(STEPS - start):
        parts = [next(it) for it in its]
        out.append({k: np.concatenate([p[k] for p in parts]) for k in parts[0]})
    for ld in loaders:
        ld.close()
    return out


def test_every_sample_is_its_source_row_left_padded_by_hand(data: dict[str, Any]) -> None:
    batches = global_batches(data["root"], 1)
    seen = {0: 0, 1: 0}
    for b in batches:
        assert b["x"].shape == b["y"].shape == b["loss_mask"].shape == (B, CONTEXT)
        assert b["x"].dtype == b["y"].dtype == np.int64
        for i in range(B):
            row = (b["x"][i].tobytes(), b["y"][i].tobytes(), b["loss_mask"][i].tobytes())
            src = int(b["source"][i])
            assert row in (data["rows"] if src == 0 else data["docs"]), (src, i)
            seen[src] += 1
    # 0.75 / 0.25 of 24 x 16 samples, exactly (the counts are closed-form).
    assert seen == {0: 288, 1: 96}


def test_hosts_and_a_resume_on_another_host_count_give_the_same_batches(
    data: dict[str, Any],
) -> None:
    root = data["root"]
    want = global_batches(root, 1)
    for world in (2, 4):
        assert batch_digest(global_batches(root, world)) == batch_digest(want), world
    with Loader(mixture(root), batch_size=B, seed=11, rank=3, world_size=4, steps=STEPS) as ld:
        it = iter(ld)
        for _ in range(9):
            next(it)
        state = ld.state_dict()
    got = global_batches(root, 2, start=9, state=state)
    assert batch_digest(got) == batch_digest(want[9:])
