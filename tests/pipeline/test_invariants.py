"""The loader's two promises, drawn at random across sources and settings: the union of
the host slices is the global batch whatever the world size, and a state saved at step k
on W hosts resumes on W' hosts with the batches a straight run gives from k on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _invariant_settings import invariant_settings
from _row_files import odirect_works, padded_rows
from headrace.formats import PaddedRows, TableSource, TokenSource
from headrace.pipeline import Loader, Mixture
from headrace.testing import batch_digest

STEPS = 12
WIDTH = 65  # stored padded width: context 64


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("invariants")
    rng = np.random.default_rng(0)
    rng.integers(0, 50_000, 3_001, dtype=np.uint16).tofile(d / "a.bin")
    rng.integers(0, 50_000, 1_777, dtype=np.uint16).tofile(d / "b.bin")
    padded_rows(d, 97, WIDTH, seed=1, prompt_mod=5, ext=".npy", empty_every=13)
    lengths = rng.integers(1, 65, 151)
    ids = [rng.integers(1, 50_000, n).tolist() for n in lengths]
    table = pa.table({"input_ids": ids, "label": np.arange(151)})
    pq.write_table(table, d / "t.parquet", row_group_size=40)
    return d


def _source(
    root: Path, kind: str, shuffle: Any, batch: int, reader: str, exact: bool = False
) -> Any:
    rows: dict[str, Any] = {"reader": reader, "empty_rows": "keep" if exact else "replace"}
    if kind == "tokens":
        return TokenSource(
            [root / "a.bin", root / "b.bin"],
            context=64,
            dtype="uint16",
            window_bytes=2_048,
            shuffle=bool(shuffle),
        )
    if kind == "padded":
        window = {"window_rows": 16} if shuffle == "window" else {}
        return PaddedRows(
            root / "tok.npy", root / "mask.npy", context=64, shuffle=shuffle, **rows, **window
        )
    if kind == "table":
        return TableSource(
            root / "t.parquet", columns=["input_ids", "label"], width=64, shuffle=shuffle
        )
    right = PaddedRows(root / "tok.npy", root / "mask.npy", context=64, shuffle=shuffle, **rows)
    left = PaddedRows(root / "tok.npy", root / "mask.npy", context=64, pad_side="left", **rows)
    return Mixture({"right": right, "left": left}, [0.7, 0.3], batch_size=batch)


def _noise(arrays: dict[str, np.ndarray], samples: Any) -> dict[str, np.ndarray]:
    """A transform drawing from each sample's own generator (it must replay)."""
    key = "x" if "x" in arrays else "input_ids"
    out = dict(arrays)
    out["noise"] = np.array([rng.integers(0, 2**31) for rng in samples.rngs()], dtype=np.int64)
    out[key] = arrays[key] + (out["noise"] % 3).astype(arrays[key].dtype)[:, None]
    return out


def _run(
    root: Path, cfg: dict[str, Any], world: int, start: dict[str, Any] | None, steps: int | None
) -> tuple[list[dict[str, np.ndarray]], dict[str, Any]]:
    """``steps`` global batches (host slices joined; ``None``: to the pass's end) from
    ``start``, and the state after."""
    parts, state = [], {}
    for rank in range(world):
        src = _source(
            root, cfg["kind"], cfg["shuffle"], cfg["batch"], cfg["reader"], bool(cfg["epochs"])
        )
        with Loader(
            src,
            batch_size=cfg["batch"],
            seed=cfg["seed"],
            rank=rank,
            world_size=world,
            prefetch=cfg["prefetch"],
            chunk_steps=cfg["chunk"],
            transform=_noise if cfg["transform"] else None,
            epochs=cfg["epochs"],
        ) as ld:
            if start is not None:
                ld.load_state_dict(start)
            it = iter(ld)
            parts.append(list(it) if steps is None else [next(it) for _ in range(steps)])
            state = ld.state_dict()
    joined = [
        {k: np.concatenate([p[t][k] for p in parts]) for k in parts[0][t]}
        for t in range(len(parts[0]))
    ]
    return joined, state


@invariant_settings(30)
@given(
    kind=st.sampled_from(["tokens", "padded", "table", "mixture"]),
    shuffle=st.sampled_from([True, "window", False]),
    batch=st.sampled_from([12, 24]),  # splits over 1 to 4 hosts
    seed=st.integers(0, 2**40),
    prefetch=st.sampled_from([0, 3]),
    chunk=st.sampled_from([1, 4]),
    worlds=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    k=st.integers(0, STEPS),
    transform=st.booleans(),
    readers=st.tuples(*[st.sampled_from(["adaptive", "mmap", "pread", "odirect"])] * 3),
    epochs=st.sampled_from([None, None, 1, 2]),
)
def test_slices_and_resume_agree_with_one_straight_run(
    root: Path,
    kind: str,
    shuffle: Any,
    batch: int,
    seed: int,
    prefetch: int,
    chunk: int,
    worlds: tuple[int, int],
    k: int,
    transform: bool,
    readers: tuple[str, str, str],
    epochs: int | None,
) -> None:
    if kind == "tokens" and shuffle == "window":
        shuffle = True  # a token file's shuffle is its windows already
    cfg = {
        "kind": kind,
        "shuffle": shuffle,
        "batch": batch,
        "seed": seed,
        "prefetch": prefetch,
        "chunk": chunk,
        "transform": transform,
        "epochs": epochs,
    }
    if "odirect" in readers and not odirect_works(root / "tok.npy"):
        readers = ("pread", "pread", "pread")
    # An exact pass (epochs) runs to its end: the straight run says how many steps.
    straight, _ = _run(root, {**cfg, "reader": readers[0]}, 1, None, None if epochs else STEPS)
    steps = len(straight)
    k = min(k, steps)
    w1, w2 = worlds
    # Each part reads through its own strategy (padded rows): the bytes must not care.
    head, state = _run(root, {**cfg, "reader": readers[1]}, w1, None, k)
    tail, _ = _run(root, {**cfg, "reader": readers[2]}, w2, state, None if epochs else steps - k)
    if epochs and k == steps:  # a finished pass, resumed, is the whole pass again
        head = []
    assert batch_digest(head + tail) == batch_digest(straight)
    if epochs and kind != "mixture":  # every sample once, the rows past the pass invalid
        valid = np.concatenate([b["sample"][b["valid"]] for b in straight])
        per_epoch = _source(root, kind, shuffle, batch, "mmap", True).samples_per_epoch
        assert sorted(valid.tolist()) == list(range(per_epoch * epochs))
    assert all(len(b[next(iter(b))]) == batch for b in straight)
    assert all(("noise" in b) == transform for b in straight)
