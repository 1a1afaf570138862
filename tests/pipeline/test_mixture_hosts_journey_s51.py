"""A mixture of token files in three formats (raw shards with sidecars, llm.c shards,
a Megatron pair with its documents' positions) resumed on 8, then 6, then 3 hosts:
every global batch is the one-host run's, and every row is an ``L``-aligned sample of
its source's file as numpy reads it, with the per-step source counts of an independent
binary apportionment (docs/rows.md, "Per-step counts")."""

from __future__ import annotations

import json
import struct
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.formats import TokenSource
from headrace.pipeline import Loader, Mixture

L, B = 16, 24
W = {"web": 0.5, "books": 0.3, "arxiv": 0.2}


@pytest.fixture
def data(tmp_path: Path) -> dict[str, list[np.ndarray]]:
    rng = np.random.default_rng(3)
    out: dict[str, list[np.ndarray]] = {"web": [], "books": [], "arxiv": []}
    (tmp_path / "web").mkdir()
    for i, n in enumerate((3_000, 4_100)):
        t = rng.integers(0, 50_000, n, dtype=np.uint16)
        t.tofile(tmp_path / "web" / f"web_{i}.bin")
        (tmp_path / "web" / f"web_{i}.bin.json").write_text(json.dumps({"dtype": "uint16"}))
        out["web"].append(t)
    for i, n in enumerate((2_500, 2_600)):  # llm.c: 256 int32 of header, then the tokens
        t = rng.integers(0, 50_000, n, dtype=np.uint16)
        header = np.zeros(256, np.int32)
        header[:3] = 20240520, 1, n
        (tmp_path / f"train_{i:06d}.bin").write_bytes(header.tobytes() + t.tobytes())
        out["books"].append(t)
    sizes = rng.integers(5, 90, 60).astype(np.int32)
    t = rng.integers(0, 50_000, int(sizes.sum()), dtype=np.uint16)
    t.tofile(tmp_path / "arxiv.bin")
    pointers = (np.cumsum(sizes, dtype=np.int64) - sizes) * 2
    with open(tmp_path / "arxiv.idx", "wb") as f:  # Megatron's MMIDIDX layout, uint16 (8)
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(sizes), len(sizes) + 1))
        f.write(sizes.tobytes() + pointers.tobytes() + np.arange(len(sizes) + 1).tobytes())
    out["arxiv"].append(t)
    out["starts"] = [pointers // 2]
    return out


def mixture(root: Path) -> Mixture:
    return Mixture(
        {
            "web": TokenSource(root / "web", context=L, positions="eos", eos_id=7),
            "books": TokenSource(str(root / "train_*.bin"), context=L, positions="bos", bos_id=7),
            "arxiv": TokenSource(root / "arxiv.bin", context=L, positions="documents"),
        },
        W,
        batch_size=B,
    )


def counts(q: list[int], n: int) -> list[int]:
    """C_s(n): halves of the sources split n by weight, half up, recursively."""
    if len(q) == 1:
        return [n]
    mid = len(q) // 2
    left = (2 * n * sum(q[:mid]) + sum(q)) // (2 * sum(q))
    return counts(q[:mid], left) + counts(q[mid:], n - left)


def run(root: Path, world: int, state: dict[str, Any] | None, stop: int) -> tuple[list[Any], Any]:
    parts, saved = [], None
    for rank in range(world):
        with Loader(
            mixture(root), batch_size=B, seed=9, rank=rank, world_size=world, steps=stop
        ) as loader:
            if state is not None:
                loader.load_state_dict(state)
            parts.append([{k: v.copy() for k, v in b.items()} for b in loader])
            saved = saved or loader.state_dict()
    steps = [
        {k: np.concatenate([p[i][k] for p in parts]) for k in parts[0][i]}
        for i in range(len(parts[0]))
    ]
    return steps, saved


def test_resumed_on_8_6_3_hosts_reads_the_files_bytes(
    tmp_path: Path, data: dict[str, list[np.ndarray]]
) -> None:
    whole, _ = run(tmp_path, 1, None, 60)
    a, s1 = run(tmp_path, 8, None, 20)
    b, s2 = run(tmp_path, 6, s1, 41)
    c, _ = run(tmp_path, 3, s2, 60)
    assert len(a + b + c) == len(whole) == 60
    for got, want in zip(a + b + c, whole, strict=True):
        for k in want:
            assert np.array_equal(got[k], want[k]), k
    samples = {
        n: {t[s : s + L + 1].tobytes(): s for t in data[n] for s in range(0, len(t) - L, L)}
        for n in W
    }
    total = sum(Fraction(w) for w in W.values())
    exact = [Fraction(w) / total * 2**16 for w in W.values()]
    q = [int(e) for e in exact]  # to 2**16, largest remainder first
    for i in sorted(range(3), key=lambda i: (q[i] - exact[i], i))[: 2**16 - sum(q)]:
        q[i] += 1
    starts = set(data["starts"][0].tolist())
    for t, batch in enumerate(whole):
        got = [int((batch["source"] == i).sum()) for i in range(3)]
        assert got == [
            x - y for x, y in zip(counts(q, (t + 1) * B), counts(q, t * B), strict=True)
        ], t
        for row in range(B):
            name = list(W)[batch["source"][row]]
            xy = np.concatenate([batch["x"][row], batch["y"][row][-1:]]).astype(np.uint16)
            assert xy.tobytes() in samples[name], (t, row, name)
            assert np.array_equal(batch["y"][row][:-1], batch["x"][row][1:])
            if name == "arxiv":  # position 0 at column 0 and at each document start
                s = samples[name][xy.tobytes()]
                want = np.zeros(L, np.int32)
                for j in range(1, L):
                    want[j] = 0 if s + j in starts else want[j - 1] + 1
                assert np.array_equal(batch["position_ids"][row], want), (t, row)
