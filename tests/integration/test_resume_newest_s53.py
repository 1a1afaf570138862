"""The newest sources on several hosts, saved at a step and resumed on another count.

A user's torchrun job (one process a rank, ``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` as
torchrun sets them, the rendezvous store held by this process as by torchrun's agent,
gloo on CPU) reads through ``HeadraceDataLoader``, two workers on
some ranks: (a) packed SFT from a ``datasets`` folder (``table_token_files(...,
labels="labels")``, ``targets="documents"``), (b) an ImageFolder tree of JPEGs and PNGs
(``format="image"``, labels from the folders, ``RandomResizedCrop``), (c) deflated NPZ
files of uneven counts under ``shuffle="samples"`` (members kept inflated across reads
since 2026-12-07), (d) a mixture of a token file and a Parquet table. One host (this
process, two workers) saved at step 2, resumed on 4 (a run of 3 hosts resumed on 2 and
then 5 passed too, by hand: 40 s of ranks, the property the same). Each step's host
slices, gathered, are the one-host global batch byte for byte (its digest), before the
save and after the resume; every rank saves the same state. Data and per-rank script:
``_newest_hosts_s53.py``.
"""

from __future__ import annotations

import json
import multiprocessing
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")
pytest.importorskip("datasets")
pytest.importorskip("PIL")
pytest.importorskip("pyarrow")

import _newest_hosts_s53 as H
from torch.distributed import TCPStore

from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest
from headrace.torch import HeadraceDataLoader, TorchDataset, _fork_server


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return H.write_data(tmp_path_factory.mktemp("newest"))


class Files:
    """Each case's samples read from its files with pyarrow and NumPy (no headrace)."""

    def __init__(self, root: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        ids: list[list[int]] = []
        labels: list[list[int]] = []
        for f in sorted((root / "sft").glob("data-*.arrow")):
            t = pa.ipc.open_stream(pa.memory_map(str(f))).read_all()
            ids += t["input_ids"].to_pylist()
            labels += t["labels"].to_pylist()
        self.ids = np.concatenate([np.asarray(r, np.int64) for r in ids])
        self.labels = np.concatenate([np.asarray(r, np.int64) for r in labels])
        lengths = np.array([len(r) for r in ids])
        first = np.cumsum(lengths) - lengths
        self.begins = np.zeros(self.ids.size + 1, bool)
        self.begins[first] = True
        self.in_doc = np.arange(self.ids.size) - np.repeat(first, lengths)
        self.npz = [np.load(root / "npz" / f"part{i}.npz") for i in range(len(H.NPZ_ROWS))]
        self.web = np.fromfile(root / "mix" / "train.bin", np.uint16).astype(np.int64)
        self.chat = {}
        for row in pq.read_table(root / "mix" / "chat.parquet")["input_ids"].to_pylist():
            padded = np.zeros(H.L + 1, np.int64)  # truncated, or padded with pad_id 0
            padded[: min(len(row), H.L + 1)] = row[: H.L + 1]
            self.chat[padded[:-1].tobytes()] = padded[1:]
        images = FileSource(root / "images", format="image", labels="folders")
        names = list(images.files.keys)
        self.classes = [images.classes.index(n.split("/")[0]) for n in names]
        images.close()

    def _at(self, tokens: np.ndarray, x: np.ndarray) -> int:
        """Where the window ``x`` starts in ``tokens`` (random ids: one place)."""
        n = len(x)
        hits = np.flatnonzero(np.lib.stride_tricks.sliding_window_view(tokens, n).__eq__(x).all(1))
        assert len(hits) == 1, (x, hits)
        return int(hits[0])

    def check(self, case: str, b: dict[str, np.ndarray]) -> None:
        for i in range(H.B):
            if case == "sft":  # y: the next token's label, -100 where it begins a document
                s = self._at(self.ids, b["x"][i])
                want = self.labels[s + 1 : s + H.L + 1].copy()
                want[self.begins[s + 1 : s + H.L + 1]] = H.IGNORE
                assert np.array_equal(b["y"][i], want)
                pos = np.minimum(self.in_doc[s : s + H.L], np.arange(H.L))
                assert np.array_equal(b["position_ids"][i], pos)
            elif case == "npz":
                f, row = divmod(int(b["y"][i]), 1000)
                assert np.array_equal(b["x"][i], self.npz[f]["x"][row])
            elif case == "images":
                assert b["label"][i] == self.classes[b["index"][i]]
            elif b["source"][i] == 0:  # the token file: x and y one apart
                s = self._at(self.web, b["x"][i])
                assert np.array_equal(b["y"][i], self.web[s + 1 : s + H.L + 1])
            else:
                assert np.array_equal(b["y"][i], self.chat[b["x"][i].tobytes()])


@pytest.fixture(scope="module")
def one_host(root: Path) -> dict[str, list[str]]:
    """Each case's global batch digests, one host, a plain Loader (no torch); every
    sample checked against its files."""
    files, out = Files(root), {}
    for case in H.CASES:
        src, transform = H.source(root, case)
        with Loader(src, batch_size=H.B, seed=H.SEED, steps=H.STEPS, transform=transform) as ld:
            batches = [{k: v.copy() for k, v in b.items()} for b in ld]
        for b in batches:
            files.check(case, b)
        out[case] = [batch_digest([b]) for b in batches]
    sources = np.concatenate([b["source"] for b in batches])
    assert set(sources.tolist()) == {0, 1}  # the mixture's batches hold both
    return out


def hosts(world: int, root: Path, out: Path, state: Path | None, save_at: int, workers: str) -> Any:
    """``world`` rank processes, as torchrun starts them; rank 0's ``run.json``.

    As torchrun's agent, this process holds the rendezvous store (on a port the system
    picks: none is taken between choosing and binding it) and every rank is its client.
    The ranks are forked by the fork server, which imported torch once for them all: a
    rank started as ``python script.py`` spends 2.5 s CPU importing it, 35 s of the
    file's 14 ranks (torchrun's agent would add one more a launch)."""
    out.mkdir()
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    env = {
        "OMP_NUM_THREADS": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(store.port),
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
    }
    _fork_server.preload()  # torch and headrace's readers, as HeadraceDataLoader asks
    asked = list(forkserver._forkserver._preload_modules)  # type: ignore[attr-defined]
    forkserver.set_forkserver_preload([*asked, "torch.distributed", H.__name__])
    ctx = multiprocessing.get_context("forkserver")
    procs = []
    for rank in range(world):
        rank_env = {**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}
        log = str(out / f"rank{rank}.log")
        args = (root, out, str(state or "-"), save_at, {int(w) for w in workers.split(",") if w})
        procs.append(ctx.Process(target=H.rank_process, args=(rank_env, log, *args)))
        procs[-1].start()
    try:
        for p in procs:
            p.join(timeout=240)
    finally:
        for p in procs:
            if p.exitcode is None:
                p.kill()
                p.join()
    files = [out / f"rank{r}.log" for r in range(world)]
    logs = {f.name: f.read_text()[-3000:] if f.exists() else "(none)" for f in files}
    assert [p.exitcode for p in procs] == [0] * world, logs
    return json.loads((out / "run.json").read_text())


def check(run: dict[str, Any], whole: dict[str, list[str]], start: int, save_at: int) -> Any:
    """The run's global batches are the one-host run's from step ``start`` on; every rank
    saved the same state at ``save_at`` (returned, a case's each, for the next run)."""
    states = {}
    for case in H.CASES:
        assert run[case]["d"] == whole[case][start:], (run["world"], case)
        saved = run[case]["states"]
        assert len(saved) == run["world"] and all(s == saved[0] for s in saved), case
        if save_at >= 0:
            assert saved[0]["step"] == save_at, case
            states[case] = saved[0]
    return states


@pytest.mark.integration
def test_1_host_of_two_workers_resumed_on_4(
    root: Path, one_host: dict[str, list[str]], tmp_path: Path
) -> None:
    states = {}
    for case in H.CASES:
        src, transform = H.source(root, case)
        ds = TorchDataset(
            src, batch_size=H.B, seed=H.SEED, steps=H.STEPS, chunk_steps=2, transform=transform
        )
        with HeadraceDataLoader(ds, num_workers=2) as dl:
            got = []
            for batch in dl:
                got.append(batch_digest([{k: v.numpy() for k, v in batch.items()}]))
                if dl.step == 2:
                    states[case] = dl.state_dict()
                    break
        assert got == one_host[case][:2], case
    (tmp_path / "at2.json").write_text(json.dumps(states))
    check(hosts(4, root, tmp_path / "w4", tmp_path / "at2.json", -1, workers="3"), one_host, 2, -1)
