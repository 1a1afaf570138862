"""Megatron-LM pairs on several hosts (s55): a mixture of uint16 pairs with their
documents' positions, and a source of int32 pairs, read by 2 rank processes (gloo on
CPU, ``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` as torchrun sets them) to a step, saved,
and resumed by 3. At every step the ranks' slices, gathered, are the one-process global
batch of an uninterrupted run byte for byte (its digest); that run's every row is a
NumPy reading of its pair at an ``L``-aligned start, its ``position_ids`` those of the
``.idx``'s documents. The pairs are packed by hand as Megatron-LM lays them out
(``test_megatron_journey_s55.write_pair``). By hand also with the pairs on S3 (moto),
launched by torchrun: the same digests."""

from __future__ import annotations

import json
import multiprocessing
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from torch.distributed import TCPStore

from _megatron_pairs import read_pair, write_pair
from headrace.formats import TokenSource
from headrace.pipeline import Loader, Mixture
from headrace.testing import batch_digest

# Ranks are forked: JAX, imported by other tests in this worker, warns of a fork.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")

L, B, SEED, STEPS, SAVE_AT = 8, 12, 3, 8, 3  # B: split by 1, 2 and 3 hosts
PAIRS = {"web_0": np.uint16, "web_1": np.uint16, "code_0": np.uint16, "big_0": np.int32}


def write_data(root: Path) -> None:
    rng = np.random.default_rng(55)
    for name, dtype in PAIRS.items():
        docs = []
        for _ in range(30):
            toks = rng.integers(1, 50_000 if dtype == np.uint16 else 200_000, rng.integers(0, 40))
            cut = int(rng.integers(0, len(toks) + 1))
            docs.append([toks[:cut], toks[cut:]] if name == "web_1" else [toks])
        write_pair(root / name, docs, dtype)


def sources(root: Path) -> dict[str, Any]:
    def src(*names: str) -> TokenSource:
        return TokenSource([root / f"{n}.bin" for n in names], context=L, positions="documents")

    mix = Mixture({"web": src("web_0", "web_1"), "code": src("code_0")}, [0.7, 0.3], batch_size=B)
    return {"mix": mix, "big": src("big_0")}


def rank_main(env: dict[str, str], root: Path, out: Path, state: str, save_at: int) -> None:
    """One rank: read each source (from ``state``) to ``STEPS``, or to ``save_at`` and
    stop there, gathering the slices to rank 0, which writes each step's global digest
    and the states saved."""
    os.environ.update(env)
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    states_in = json.loads(Path(state).read_text()) if state != "-" else {}
    result: dict[str, Any] = {}
    for case, src in sources(root).items():
        with Loader(src, batch_size=B, seed=SEED, steps=STEPS, rank=rank, world_size=world) as ld:
            if case in states_in:
                ld.load_state_dict(states_in[case])
            digests, saved = [], None
            for batch in ld:
                parts: list[Any] = [None] * world
                dist.all_gather_object(parts, {k: v.copy() for k, v in batch.items()})
                digests.append(
                    batch_digest([{k: np.concatenate([p[k] for p in parts]) for k in batch}])
                )
                if ld.step == save_at:  # saved, and the job stops (read-ahead under way)
                    saved = ld.state_dict()
                    break
            states: list[Any] = [None] * world
            dist.all_gather_object(states, saved)
        result[case] = {"d": digests, "states": states}
    if rank == 0:
        out.write_text(json.dumps(result))
    dist.destroy_process_group()


def hosts(world: int, root: Path, out: Path, state: str, save_at: int) -> dict[str, Any]:
    """``world`` rank processes (forked: torch is imported once, here) around a
    rendezvous store this process holds, as torchrun's agent does."""
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port), "WORLD_SIZE": str(world)}
    env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(target=rank_main, args=({**env, "RANK": str(r)}, root, out, state, save_at))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout=120)
    finally:
        for p in procs:
            if p.exitcode is None:
                p.kill()
                p.join()
    assert [p.exitcode for p in procs] == [0] * world
    return dict(json.loads(out.read_text()))


def check_rows(root: Path, case: str, batch: dict[str, np.ndarray]) -> None:
    """Every row: ``x``, ``y`` and ``position_ids`` of its pair as NumPy reads it."""
    names = {"web": ["web_0", "web_1"], "code": ["code_0"], "big": ["big_0"]}
    for i in range(B):
        which = case if case == "big" else ("web", "code")[int(batch["source"][i])]
        hits = []
        for name in names[which]:
            tokens, bounds = read_pair(root / f"{name}.bin")
            for s in range(0, len(tokens) - L, L):
                if np.array_equal(tokens[s : s + L], batch["x"][i]):
                    at = np.arange(s, s + L)
                    in_doc = at - bounds[np.searchsorted(bounds, at, side="right") - 1]
                    assert np.array_equal(tokens[s + 1 : s + L + 1], batch["y"][i])
                    assert np.array_equal(
                        batch["position_ids"][i], np.minimum(in_doc, np.arange(L))
                    )
                    hits.append(s)
        assert len(hits) == 1, (case, i, hits)


@pytest.mark.integration
def test_megatron_pairs_on_2_hosts_resumed_on_3(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    write_data(root)
    whole: dict[str, list[str]] = {}
    for case, src in sources(root).items():
        with Loader(src, batch_size=B, seed=SEED, steps=STEPS) as ld:
            batches = [{k: v.copy() for k, v in b.items()} for b in ld]
        for b in batches:
            check_rows(root, case, b)
        whole[case] = [batch_digest([b]) for b in batches]
        assert batches[0]["x"].dtype == PAIRS[f"{case if case == 'big' else 'web'}_0"]

    two = hosts(2, root, tmp_path / "w2.json", "-", SAVE_AT)
    saved = {}
    for case in whole:
        assert two[case]["d"] == whole[case][:SAVE_AT], case
        states = two[case]["states"]
        assert all(s == states[0] for s in states) and states[0]["step"] == SAVE_AT, case
        saved[case] = states[0]
    (tmp_path / "state.json").write_text(json.dumps(saved))
    three = hosts(3, root, tmp_path / "w3.json", str(tmp_path / "state.json"), -1)
    for case in whole:
        assert three[case]["d"] == whole[case][SAVE_AT:], case
