"""A pretraining job preempted by SIGKILL and resumed on other host and worker counts
(s56): gloo ranks (forked, around a rendezvous store this process holds, as torchrun's
agent does) read a mixture of the three token layouts a run meets (a nanoGPT
``train.bin``, a Megatron-LM ``.bin``/``.idx`` pair, a raw ``uint32`` file with its JSON
sidecar; the ``uint16`` ones widened by ``Mapped``) through ``HeadraceDataLoader``,
checkpoint ``dl.state_dict()`` on rank 0 every few steps (written whole, renamed over),
and are killed together in the middle of a step: 2 ranks without workers, then 1 rank
with 2 workers (one fork server to start: the test's CPU), then 3 ranks. Every step's
ranks' slices, joined, are the global batch of an uninterrupted one-process run, byte
for byte; and the steps the model was trained on (each run's, from its checkpoint to the
next run's) read each window of each file, as NumPy reads it, once an epoch: none
skipped or repeated at a resume. By hand (/tmp scripts, 2026-12-07) also through a stock
DataLoader and torchdata's StatefulDataLoader with 2 workers, 2, 3 and 1 launched rank
processes, kills while the checkpoint was written and within 0.5 s of start-up, and
global batches 12, 18, 8, 6 on a single source: the same."""

from __future__ import annotations

import collections
import multiprocessing
import os
import signal
import struct
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from torch.distributed import TCPStore  # noqa: E402

from headrace.formats import TokenSource  # noqa: E402
from headrace.pipeline import Loader, Mapped, Mixture  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")

L, B, SEED, STEPS, EVERY = 16, 12, 56, 18, 4  # B: split by 1, 2 and 3 hosts


def widen(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    return {**arrays, "x": arrays["x"].astype(np.uint32), "y": arrays["y"].astype(np.uint32)}


def write_data(root: Path) -> dict[str, np.ndarray]:
    """The files as their tools write them; returns each one's tokens as NumPy reads them."""
    rng = np.random.default_rng(56)
    # nanoGPT's prepare.py: np.memmap(..., dtype=np.uint16, mode="w+")
    arr = np.memmap(root / "train.bin", dtype=np.uint16, mode="w+", shape=(1_500,))
    arr[:] = rng.integers(0, 50_257, 1_500, dtype=np.uint16)
    arr.flush()
    del arr
    # Megatron-LM's IndexedDatasetBuilder: documents back to back, then the index.
    docs = [rng.integers(1, 50_000, int(rng.integers(1, 90)), dtype=np.uint16) for _ in range(25)]
    (root / "code_text_document.bin").write_bytes(b"".join(d.tobytes() for d in docs))
    lens = np.array([len(d) for d in docs], np.int32)
    ptrs = np.concatenate([[0], np.cumsum(lens[:-1].astype(np.int64) * 2)]).astype(np.int64)
    head = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(lens), len(lens) + 1)
    index = np.arange(len(lens) + 1, dtype=np.int64).tobytes()
    (root / "code_text_document.idx").write_bytes(head + lens.tobytes() + ptrs.tobytes() + index)
    rng.integers(0, 128_256, 900, dtype=np.uint32).tofile(root / "l3.bin")
    (root / "l3.bin.json").write_text('{"dtype": "uint32"}')
    return {
        "owt": np.fromfile(root / "train.bin", np.uint16).astype(np.uint32),
        "code": np.concatenate(docs).astype(np.uint32),
        "l3": np.fromfile(root / "l3.bin", np.uint32),
    }


def mixture(root: Path) -> Mixture:
    return Mixture(
        {
            "owt": Mapped(TokenSource(root / "train.bin", context=L), widen),
            "code": Mapped(TokenSource(root / "code_text_document.bin", context=L), widen),
            "l3": TokenSource(root / "l3.bin", context=L),
        },
        {"owt": 0.5, "code": 0.3, "l3": 0.2},
        batch_size=B,
    )


def rank_main(env: dict[str, str], root: Path, out: Path, workers: int, kill_at: int) -> None:
    os.environ.update(env)
    # Forked from a test process whose forkserver an earlier test started: that server is
    # not this child's to wait on (ChildProcessError), so the rank starts its own.
    from multiprocessing import forkserver

    server = forkserver._forkserver  # type: ignore[attr-defined]
    server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None
    import torch.distributed as dist

    from headrace.torch import HeadraceDataLoader, TorchDataset

    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    ds = TorchDataset(mixture(root), batch_size=B, seed=SEED, steps=STEPS)  # ranks: gloo's
    ckpt = out.parent / "ckpt.pt"
    if ckpt.exists():
        ds.load_state_dict(torch.load(ckpt)["data"])
    dl = HeadraceDataLoader(ds, num_workers=workers)
    (out / f"start_{rank}").write_text(str(dl.step))
    for batch in dl:
        np.save(out / f"{dl.step - 1}_{rank}.npy", batch["x"].numpy())
        if dl.step - 1 == kill_at:  # a long step: the kill comes in the middle of it
            (out / f"in_step_{rank}").touch()
            time.sleep(120)
        dist.barrier()  # the training step's collectives
        if dl.step % EVERY == 0:
            state = dl.state_dict()
            if rank == 0:
                torch.save({"data": state}, f"{ckpt}.tmp")
                os.replace(f"{ckpt}.tmp", ckpt)
            dist.barrier()
    dl.close()
    dist.destroy_process_group()


def job(world: int, workers: int, root: Path, out: Path, kill_at: int | None) -> int:
    """Runs ``world`` ranks; kills them all once rank 0 has a batch of step ``kill_at``
    (None: to the end). Returns the step this run started at."""
    out.mkdir()
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port), "WORLD_SIZE": str(world)}
    env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(
            target=rank_main, args=({**env, "RANK": str(r)}, root, out, workers, kill_at or -1)
        )
        for r in range(world)
    ]
    for p in procs:
        p.start()
    try:
        end = time.monotonic() + 120
        while kill_at is not None and not all(
            (out / f"{kill_at}_{r}.npy").exists() for r in range(world)
        ):
            assert time.monotonic() < end and all(p.exitcode is None for p in procs)
            time.sleep(0.01)
        for p in procs:
            if kill_at is not None:
                os.kill(p.pid, signal.SIGKILL)  # the whole job, in the middle of a step
            p.join(timeout=120)
    finally:
        for p in procs:
            if p.exitcode is None:
                p.kill()
                p.join()
    assert [p.exitcode for p in procs] == [0 if kill_at is None else -signal.SIGKILL] * world
    return int((out / "start_0").read_text())


@pytest.mark.integration
def test_a_preempted_mixture_resumes_exactly_on_2_then_1_then_3_hosts(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    tokens = write_data(root)
    with Loader(mixture(root), batch_size=B, seed=SEED, steps=STEPS) as ld:
        straight = [b["x"].copy() for b in ld]
    runs = [(2, 0, 6), (1, 2, 10), (3, 0, None)]  # (hosts, workers a host, step killed at)
    starts = []
    for i, (world, workers, kill_at) in enumerate(runs):
        starts.append(job(world, workers, root, tmp_path / f"run{i}", kill_at))
    assert starts == [0, 4, 8]  # each from the last checkpoint written whole
    trained = []
    for i, (world, _, kill_at) in enumerate(runs):
        for step in range(starts[i], STEPS if kill_at is None else kill_at + 1):
            rows = [np.load(tmp_path / f"run{i}" / f"{step}_{r}.npy") for r in range(world)]
            joined = np.concatenate(rows)
            assert joined.tobytes() == straight[step].tobytes(), (i, step)
            if i + 1 == len(runs) or step < starts[i + 1]:
                trained.append(joined)
    assert len(trained) == STEPS
    # Each window of each file (as NumPy reads it) read k or k + 1 times by the steps
    # trained on: a sample skipped or read twice at a resume would break it.
    where: dict[bytes, tuple[str, int]] = {}
    for name, toks in tokens.items():
        for at in range(0, len(toks) - L, L):
            where[toks[at : at + L].tobytes()] = (name, at)
    read = collections.Counter(where[row.tobytes()] for row in np.concatenate(trained))
    for name, toks in tokens.items():
        counts = [read[(name, at)] for at in range(0, len(toks) - L, L)]
        k = sum(counts) // len(counts)
        assert min(counts) >= k and max(counts) <= k + 1, (name, counts)
