"""headrace beside the loaders users would otherwise pick: torch, torchdata, Streaming, Grain, DALI.

The rivals are not headrace dependencies: put them in a venv of their own that sees the
installed packages (torch, NumPy) and run the script with that venv's Python:

    python -m venv --system-site-packages /tmp/headrace-rivals-venv
    pip freeze | grep -E '^(numpy|torch)==' > /tmp/rivals-constraints.txt
    /tmp/headrace-rivals-venv/bin/pip install -c /tmp/rivals-constraints.txt \
        mosaicml-streaming grain
    PYTHONPATH=src /tmp/headrace-rivals-venv/bin/python benchmarks/rivals.py [--quick]

(torchdata's StatefulDataLoader comes with the installed torchdata >= 0.11, if any. DALI
is optional: `pip install -c /tmp/rivals-constraints.txt nvidia-dali-cuda120` in the same
venv, a 424 MB wheel and 100 MB of CUDA codec wheels, 1 GB installed; it runs CPU-only. The
constraints keep torch and NumPy as they are: with NumPy >= 2.2 pip resolves
mosaicml-streaming to 0.10.0, the last release without a `numpy<2.2` pin.) A rival that
does not import is skipped, with the reason and the pip command printed.

The token-window workload: B=32 windows of L+1=1025 uint32 tokens (x, and y shifted by
one) from a 256 MiB token file (32 MiB with --quick), random windows, seed 1, warm page
cache, and a consumer that does nothing with each batch. Sides:

  headrace sync / async   Loader(TokenSource, prefetch=0 / 8): windows planned in closed form
  headrace w=2            HeadraceDataLoader(TorchDataset, num_workers=2)
  torch w=0 / w=2         DataLoader over a map-style Dataset on np.memmap (nanoGPT-like):
                          sample i = t[i*L : i*L+L+1], shuffle=True with a seeded generator,
                          drop_last, persistent_workers with workers; resume = skip-ahead
  torchdata w=0 / w=2     torchdata's StatefulDataLoader, configured as the torch sides;
                          resume = its state_dict / load_state_dict
  torchdata.nodes w=0 / 2 the pipeline of torchdata's migration guide on the same Dataset:
                          SamplerWrapper, Batcher(B, drop_last), Mapper (w=0) or
                          ParallelMapper(method="process", in_order=True) and Prefetcher
                          (w=2), Loader; the sampler a DistributedSampler over one replica,
                          seed 1 (the guide's RandomSampler does not resume past epoch 0);
                          resume = Loader.state_dict / load_state_dict
  streaming w=0 / w=2     MDS shards of the same samples (MDSWriter, no compression), then
                          StreamingDataset(local=..., shuffle=True, batch_size=B) under
                          StreamingDataLoader; resume = its state_dict / load_state_dict
  grain w=0 / w=2         grain.python.DataLoader over a RandomAccessDataSource on the same
                          memmap, IndexSampler(shuffle=True, seed=1), Batch(B); default
                          ReadOptions (16 read threads); resume = iterator get_state/set_state
  grain w=0 threads=0     the same with ReadOptions(num_threads=0): faster here (docs/bench.md)
  grain MapDataset        MapDataset.source(...).shuffle(1).repeat().batch(B).to_iter_dataset()
  DALI w=0 / w=2 (CPU)    Pipeline(device_id=None, enable_checkpointing=True) of one
                          fn.external_source: a per-sample callback on the same memmap, its
                          own permutation per epoch (DALI does not shuffle an external
                          source); w=2: parallel=True, py_num_workers=2; resume = a checkpoint

What is measured, per side (each loader's own defaults unless said):
  batches/s   steady state, payload GB/s = B x (L+1) x 4 bytes per batch for every side;
              each trial opens a fresh loader, takes 50 batches (8 after the first
              trial), then times --trial-s
              seconds; sides alternate (A B C ... A B C ...), median and min-max
  first s     seconds from constructing the loader to its first batch (median of trials)
  resume s    seconds from restoring a state at step 100,000 to the first batch after it.
              The state is the loader's own, saved at the end of a trial and advanced to
              step 100,000 in its own format (a step count; Streaming's epoch and
              sample_in_epoch; torchdata's generator state at the epoch's permutation and
              the batches yielded in the epoch; Grain's last_seen_indices / next_index);
              the advance rule is checked against real saved states (below). torch has no
              state: users skip ahead by iterating, so its figure is first s + 100,000 /
              batches/s, marked "est." (running it would take minutes).
  resume ok   a run saves its state at step --check-step (300; 100 with --quick) and goes
              on for 50 batches; a fresh loader restores that state and gives 50 batches:
              SHA-256 equal? The same run then saves its state 25 batches before the end
              of the second epoch and goes on for 50, into the third epoch; restored, the
              same? Also checked: a rerun from step 0 gives the same first 50 batches, and
              the states at --check-step and before the end of the second epoch equal the
              states at half of --check-step and at --check-step, advanced. On every side
              but Grain threads=0 (with --quick: w=0 sides only).
  w0 = w2     the first 50 batches with 0 and with 2 workers equal (SHA-256)?
Samples differ between loaders (each has its own shuffle): digests are compared within a
loader only. Preparation (the token file, MDS conversion) is reported apart.

Exit status 1 if a loader fails a determinism property it claims: every loader claims
reruns and resume; headrace, torch, torchdata's StatefulDataLoader (a drop-in replacement
for torch's) and torchdata.nodes (in_order=True), whose samplers run in the main process,
and Streaming ("elastic determinism": the same order for any number of workers) claim
worker-count invariance; Grain does not (each worker batches its own records), nor DALI
(its follows from the callback's being stateless), so their w0 = w2 is only reported.

Predictions, written before the first full run (after an 8 MiB smoke test of the rival
APIs that showed Grain's DataLoader at ~60 batches/s and Streaming at ~80 on this loaded
2-core machine): headrace sync ~30,000 batches/s (README: 34,676 on 1 GiB); torch w=0
~1,500 (a Python __getitem__ and a 4 KB copy per sample, then torch.stack), so headrace
~20x; torch w=2 ~2,000 (~15x); Streaming ~100-300 (~100-300x); Grain DataLoader default
~60 (~500x), threads=0 ~280 (~100x), MapDataset ~400 (~75x). First batch: headrace
~0.1 s, torch/Streaming w=0 < 0.2 s, Grain w=2 ~7 s (spawned workers import grain and
torch). Resume at step 100,000: headrace = its first batch (closed form); Streaming and
Grain about their first batch (both restore in O(1) or O(epoch)); torch skip-ahead ~60 s
(est.). Resume bit-exact: yes for all. w0 = w2: yes for headrace, torch, Streaming; no
for Grain. Measured against these: docs/bench.md, "Against other loaders".

Predictions for torchdata's StatefulDataLoader, written before its first run here (after
a 200-sample probe of its state format, which showed the resume defect below): w=0 about
torch w=0 (the same fetch and collate; a Python sampler iterator and a few counters more
per batch), ~5,000 batches/s; w=2 below torch w=2 (~900) as its workers also snapshot
their state with every batch by default (snapshot_every_n_steps=1), ~700. First batch as
torch's (w=0 ~0.005 s, w=2 ~0.05 s). Resume at step 100,000: it redraws the epoch's
permutation and skips the epoch's 55,808 consumed indices one by one in Python, ~0.02 s
(w=0), plus starting workers, ~0.1 s (w=2). Resume bit-exact inside an epoch: yes; over an
epoch end, w=0: NO (the probe: with w=0 a new iterator draws its base seed from the
generator that shuffles, after the epoch's permutation; a restore replays the permutation
but not that draw, so every epoch after the one resumed in differs from an uninterrupted
run), w=2: yes. w0 = w2: yes. Its first 50 batches differ from torch's (it draws the
permutation before the base seed, torch's sampler after).

torchdata.nodes, predicted after one --quick run of all torchdata sides (which also showed
StatefulDataLoader's w=0 and w=2 giving different batches, not predicted above: its w=2
iterator draws and discards one permutation before the first epoch): w=0 about torch
w=0, ~5,000 batches/s; w=2 ~600 (a process pool behind a prefetch thread; --quick: 530);
first batch w=0 ~0.002 s, w=2 ~0.1 s; resume at step 100,000: the sampler reshuffles for
the epoch and skips 55,808 indices, ~0.01 s (w=0), ~0.1 s (w=2); bit-exact over an epoch
end: yes; w0 = w2: yes.

DALI, predicted after a probe of its CPU-only external source on the 32 MiB file (3,018
batches/s w=0, 755 w=2) and one --quick run (3,544 and 882): w=0 ~3,000 batches/s (a Python
callback per sample, like torch's __getitem__, then a copy into DALI's batch), w=2 ~800;
first batch ~0.005 s (w=0), ~0.04 s (w=2, forked workers); resume at step 100,000: the
checkpoint holds the epoch and the batch in it, and the callback is a function of the
sample's place, so ~0.005 s (w=0), ~0.05 s (w=2); bit-exact over an epoch end: yes; w0 =
w2: yes (not claimed: it follows from the callback's being stateless).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import hashlib
import importlib
import importlib.metadata as md
import json
import os
import platform
import re
import shutil
import statistics
import sys
import time
import traceback
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _out import out
from torch.utils.data import DataLoader, Dataset, DistributedSampler, default_collate

import headrace
from headrace.formats import TokenSource
from headrace.pipeline import Loader
from headrace.torch import HeadraceDataLoader, TorchDataset

B, L, SEED, K = 32, 1024, 1, 50
RESUME_STEP = 100_000
WARM = 8  # batches taken before the clock in trials after the first (the first digests 50)
# Loaders that claim the same batches for any number of workers (Grain does not).
CLAIM_WORKERS = ("headrace", "torch", "torchdata", "torchdata-nodes", "streaming")
PIP = (
    "pip freeze | grep -E '^(numpy|torch)==' > /tmp/rivals-constraints.txt && "
    "pip install -c /tmp/rivals-constraints.txt mosaicml-streaming grain  "
    "(in a venv made with --system-site-packages)"
)
# torch warns once that a Streaming sample (a read-only view of its shard) is not writable.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


# -- data ------------------------------------------------------------------------------
def write_tokens(path: Path, mib: int) -> float:
    """The token file (seeded, uint32 ids < 50,257); seconds spent, 0 if it was there."""
    if path.exists() and path.stat().st_size == mib << 20:
        return 0.0
    t0 = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as f:
        for _ in range(mib // 16):
            rng.integers(0, 50_257, 4 << 20, dtype=np.uint32).tofile(f)
    os.replace(tmp, path)
    return time.perf_counter() - t0


def warm(path: Path) -> None:
    with path.open("rb", buffering=0) as f:
        buf = bytearray(16 << 20)
        while f.readinto(buf):
            pass


class MemmapSamples(Dataset[torch.Tensor]):
    """nanoGPT's kind of dataset, map-style: sample i is t[i*L : i*L+L+1], a fresh copy.

    The memmap is opened lazily, so each DataLoader worker opens its own.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.n = (path.stat().st_size // 4 - 1) // L
        self._m: np.memmap[Any, np.dtype[np.uint32]] | None = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self._m is None:
            self._m = np.memmap(self.path, dtype=np.uint32, mode="r")
        return torch.from_numpy(np.array(self._m[i * L : i * L + L + 1]))


class MapAndCollate:
    """torchdata.nodes' map function from its migration guide: a batch of indices to a batch."""

    def __init__(self, ds: MemmapSamples) -> None:
        self.ds = ds

    def __call__(self, idx: list[int]) -> torch.Tensor:
        return default_collate([self.ds[i] for i in idx])  # type: ignore[no-any-return]


class DaliSamples:
    """DALI's per-sample external source on the same memmap: sample_info -> a fresh copy.

    DALI does not shuffle an external source: the permutation is the callback's, one per
    epoch (NumPy, seeded by (seed, epoch)), as a DALI user writes it. A function of
    sample_info alone, so DALI's checkpoints (epoch and iteration) resume it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.n = (path.stat().st_size // 4 - 1) // L
        self._m: np.memmap[Any, np.dtype[np.uint32]] | None = None
        self._perm: tuple[int, np.ndarray[Any, Any]] | None = None

    def __call__(self, info: Any) -> np.ndarray[Any, np.dtype[np.uint32]]:
        if info.idx_in_epoch >= self.n // B * B:
            raise StopIteration  # drop_last: the epoch ends at its last full batch
        if self._perm is None or self._perm[0] != info.epoch_idx:
            rng = np.random.default_rng([SEED, info.epoch_idx])
            self._perm = (info.epoch_idx, rng.permutation(self.n))
        if self._m is None:
            self._m = np.memmap(self.path, dtype=np.uint32, mode="r")
        i = int(self._perm[1][info.idx_in_epoch])
        return np.array(self._m[i * L : i * L + L + 1])

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "n": self.n, "_m": None, "_perm": None}


class GrainSource:
    """A random-access source for Grain on the same memmap and samples (numpy out).

    Its repr names the file: Grain writes the source's repr into its checkpoints.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.n = (path.stat().st_size // 4 - 1) // L
        self._m: np.memmap[Any, np.dtype[np.uint32]] | None = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray[Any, np.dtype[np.uint32]]:
        if self._m is None:
            self._m = np.memmap(self.path, dtype=np.uint32, mode="r")
        return np.array(self._m[i * L : i * L + L + 1])

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "n": self.n, "_m": None}

    def __repr__(self) -> str:
        return f"GrainSource({str(self.path)!r}, L={L})"


# -- rivals: imported if installed ----------------------------------------------------
def import_streaming() -> tuple[types.ModuleType | None, str]:
    """Streaming, and a note: why it is missing, or what had to be worked around."""
    try:
        return importlib.import_module("streaming"), ""
    except ModuleNotFoundError as exc:
        return None, f"{exc}; install: {PIP}"
    except Exception as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        if not any("torchvision" in f.filename for f in frames):
            return None, f"import streaming: {type(exc).__name__}: {exc}"
        first = f"{type(exc).__name__}: {exc}"
    # `import streaming` imports streaming.vision, which imports torchvision; PyPI's
    # torchvision is a CUDA build whose ops do not load beside a CPU-only torch. The MDS
    # reader and StreamingDataset do not use torchvision: load them without that subpackage.
    for name in [m for m in sys.modules if m.split(".")[0] in ("streaming", "torchvision")]:
        del sys.modules[name]
    sys.modules["streaming.vision"] = types.ModuleType("streaming.vision")
    try:
        mod = importlib.import_module("streaming")
    except Exception as exc:
        return None, f"import streaming: {first}; without streaming.vision: {exc}"
    return mod, f"`import streaming` failed ({first}); loaded without streaming.vision"


def import_grain() -> tuple[types.ModuleType | None, str]:
    try:
        gp = importlib.import_module("grain.python")
    except ModuleNotFoundError as exc:
        return None, f"{exc}; install: {PIP}"
    except Exception as exc:
        return None, f"import grain.python: {type(exc).__name__}: {exc}"
    # Grain reads absl flags in its worker setup; outside absl.app.run they must be parsed.
    from absl import flags

    flags.FLAGS(sys.argv[:1])
    return gp, ""


def import_torchdata() -> tuple[Any, types.ModuleType | None, str]:
    """torchdata's StatefulDataLoader (a class) and torchdata.nodes, or None and why."""
    try:
        mod = importlib.import_module("torchdata.stateful_dataloader")
        nodes = importlib.import_module("torchdata.nodes")
    except ModuleNotFoundError as exc:
        return None, None, f"{exc}; install: pip install torchdata (in the venv)"
    except Exception as exc:
        return None, None, f"import torchdata: {type(exc).__name__}: {exc}"
    # Its constructor calls the deprecated torch.set_vital, which warns once per loader.
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    return mod.StatefulDataLoader, nodes, ""


def import_dali() -> tuple[types.ModuleType | None, str]:
    try:
        return importlib.import_module("nvidia.dali"), ""
    except ModuleNotFoundError as exc:
        return None, f"{exc}; install: pip install nvidia-dali-cuda120 (in the venv; runs CPU-only)"
    except Exception as exc:
        return None, f"import nvidia.dali: {type(exc).__name__}: {exc}"


def version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "-"


# -- sides -------------------------------------------------------------------------------
@dataclass
class Live:
    """An open loader: its batches (as lists of arrays), its state, and how to close it."""

    batches: Iterator[list[np.ndarray[Any, Any]]]
    save: Callable[[], Any]
    close: Callable[[], None]
    consumed: int = 0

    def take(self, n: int) -> None:
        for _ in islice(self.batches, n):
            self.consumed += 1


@dataclass
class Side:
    name: str
    family: str
    workers: int
    open: Callable[[Any], Live]  # a fresh loader, resumed at the given state (None: step 0)
    advance: Callable[[Any, int, int], Any]  # (state at step a, a, b) -> the state at step b
    check: bool = False  # resume and rerun checked on this side (--quick: only w=0)
    step_multiple: int = 1  # states advance by multiples of this (Grain: per-worker rounds)
    skip_resume: bool = False  # no state: resume is skip-ahead, estimated
    rates: list[float] = field(default_factory=list)
    firsts: list[float] = field(default_factory=list)
    digest: str = ""
    resume_s: float | None = None
    resume_est: bool = False
    resume_step: int = 0
    checks: dict[str, bool] = field(default_factory=dict)
    end_state: Any = None
    end_step: int = 0


def arrays(batch: Any) -> list[np.ndarray[Any, Any]]:
    if isinstance(batch, dict):
        return [np.asarray(batch[k]) for k in sorted(batch)]
    if isinstance(batch, torch.Tensor):
        return [batch.numpy()]
    return [np.asarray(batch)]


def epochs(loader: Any) -> Iterator[Any]:
    """Iterate a per-epoch loader again and again, as a training loop's epochs do."""
    while True:
        yield from loader


def headrace_side(path: Path, name: str, *, prefetch: int = 0, workers: int | None = None) -> Side:
    def open_(state: Any) -> Live:
        src = TokenSource(path, dtype="uint32", context=L)
        ld: Loader | HeadraceDataLoader
        if workers is None:
            ld = Loader(src, batch_size=B, seed=SEED, prefetch=prefetch)
        else:
            ld = HeadraceDataLoader(TorchDataset(src, batch_size=B, seed=SEED), num_workers=workers)
        if state is not None:
            ld.load_state_dict(state)
        it = iter(ld)

        def close() -> None:
            it.close()  # type: ignore[attr-defined]
            ld.close()
            src.close()

        return Live((arrays(b) for b in it), ld.state_dict, close)

    def advance(state: Any, a: int, b: int) -> Any:
        return {**state, "step": state["step"] + (b - a)}

    return Side(name, "headrace", workers or 0, open_, advance, check=True)


def memmap_loader(cls: Any, path: Path, workers: int) -> Any:
    """A torch-style loader (``DataLoader`` or torchdata's ``StatefulDataLoader``) over
    the nanoGPT-like map-style Dataset, as a user sets one up: shuffled by a seeded
    generator, last partial batch dropped, workers kept across epochs."""
    return cls(
        MemmapSamples(path),
        batch_size=B,
        shuffle=True,
        generator=torch.Generator().manual_seed(SEED),
        num_workers=workers,
        drop_last=True,
        persistent_workers=workers > 0,
    )


def torch_side(path: Path, workers: int) -> Side:
    def open_(state: Any) -> Live:
        dl = memmap_loader(DataLoader, path, workers)
        gen = epochs(dl)
        live = Live((arrays(b) for b in gen), lambda: None, gen.close)
        if state:  # skip-ahead: what users do with a stock DataLoader
            live.take(state)
        live.save = lambda: live.consumed
        return live

    def advance(state: Any, a: int, b: int) -> Any:
        return state + (b - a)

    return Side(
        f"torch DataLoader w={workers}", "torch", workers, open_, advance, check=True,
        skip_resume=True,
    )  # fmt: skip


def stateful_side(sdl: Any, path: Path, n: int, workers: int) -> Side:
    """torchdata's StatefulDataLoader, configured as the torch sides; resume = its state_dict."""
    per_epoch = n // B

    def open_(state: Any) -> Live:
        dl = memmap_loader(sdl, path, workers)
        if state is not None:
            dl.load_state_dict(state)
        gen = epochs(dl)
        return Live((arrays(b) for b in gen), dl.state_dict, gen.close)

    def advance(state: Any, a: int, b: int) -> Any:
        # The state is per epoch: the generator's state when the epoch's permutation was
        # drawn, and the batches yielded in the epoch (a state at its last batch stays in
        # it). Later epochs' generator states come from replaying the draws between them:
        # the permutation, and with w=0 the base seed each new iterator draws from the same
        # generator (persistent workers keep theirs).
        ea, eb = (a - 1) // per_epoch, (b - 1) // per_epoch
        local = b - eb * per_epoch
        s = copy.deepcopy(state)
        main = s["_snapshot"]["_main_snapshot"] if workers else s
        it = main["_sampler_iter_state"]
        g = torch.Generator()
        g.set_state(it["sampler_iter_state"]["generator"])
        for _ in range(eb - ea):
            torch.randperm(n, generator=g)
            if workers == 0:
                torch.empty((), dtype=torch.int64).random_(generator=g)
        it["sampler_iter_state"]["generator"] = g.get_state()
        it["samples_yielded"] = it["sampler_iter_state"]["yielded"] = local * B
        main["_sampler_iter_yielded"] = local
        if workers:
            s["_snapshot"]["_snapshot_step"] = local
            s["_snapshot"]["_last_yielded_worker_id"] = (local - 1) % workers
        else:
            s["_num_yielded"] = local
        return s

    return Side(f"torchdata StatefulDataLoader w={workers}", "torchdata", workers, open_, advance,
                check=True)  # fmt: skip


def nodes_side(tn: types.ModuleType, path: Path, n: int, workers: int) -> Side:
    """torchdata.nodes as its migration guide builds a DataLoader, with an epoch-seeded sampler.

    The guide's RandomSampler keeps no state: a restore in a later epoch replays epoch 0's
    permutation. SamplerWrapper saves the epoch and calls set_epoch, so the sampler here is
    one that reshuffles by epoch: DistributedSampler over one replica (its epoch 0 is
    RandomSampler's with the same seed).
    """
    per_epoch = n // B

    def open_(state: Any) -> Live:
        ds = MemmapSamples(path)
        sampler = DistributedSampler(
            ds, num_replicas=1, rank=0, shuffle=True, seed=SEED, drop_last=True
        )
        node = tn.Batcher(tn.SamplerWrapper(sampler), batch_size=B, drop_last=True)
        if workers:
            node = tn.ParallelMapper(
                node, MapAndCollate(ds), num_workers=workers, method="process", in_order=True
            )
            node = tn.Prefetcher(node, prefetch_factor=2 * workers)
        else:
            node = tn.Mapper(node, MapAndCollate(ds))
        loader = tn.Loader(node)
        if state is not None:
            loader.load_state_dict(state)
        gen = epochs(loader)
        return Live((arrays(b) for b in gen), loader.state_dict, gen.close)

    def advance(state: Any, a: int, b: int) -> Any:
        del a
        # Per epoch too, a state at the epoch's last batch staying in it; the sampler's
        # state (epoch, samples yielded) sits under one node per stage.
        epoch = (b - 1) // per_epoch
        local = b - epoch * per_epoch
        s = copy.deepcopy(state)
        s["num_yielded"] = local
        todo = [s["root"]]
        while todo:
            d = todo.pop()
            if "_epoch" in d:
                d["_epoch"], d["_num_yielded"] = epoch, local * B
            todo += [v for v in d.values() if isinstance(v, dict)]
        return s

    return Side(f"torchdata.nodes w={workers}", "torchdata-nodes", workers, open_, advance,
                check=True)  # fmt: skip


def dali_side(dali: types.ModuleType, path: Path, n: int, workers: int) -> Side:
    """DALI on the CPU (device_id=None): external_source with a per-sample callback, batch B;
    w=2 is its parallel external source (parallel=True, py_num_workers=2). Resume = a
    checkpoint (enable_checkpointing=True) passed to a new pipeline."""
    per_epoch = n // B
    fn, types_ = (
        importlib.import_module("nvidia.dali.fn"),
        importlib.import_module("nvidia.dali.types"),
    )

    def open_(state: Any) -> Live:
        pipe = dali.pipeline.Pipeline(
            batch_size=B, num_threads=1, device_id=None, enable_checkpointing=True,
            py_num_workers=max(1, workers), checkpoint=state,
        )  # fmt: skip
        with pipe:
            pipe.set_outputs(
                fn.external_source(
                    source=DaliSamples(path), batch=False, dtype=types_.UINT32, parallel=workers > 0
                )
            )
        pipe.build()

        def gen() -> Iterator[list[np.ndarray[Any, Any]]]:
            while True:  # epochs: a pipeline raises StopIteration at an epoch's end
                try:
                    (out,) = pipe.run()
                except StopIteration:
                    pipe.reset()
                    continue
                yield [np.array(out.as_tensor())]

        def close() -> None:
            pool = getattr(pipe, "_py_pool", None)  # its worker processes, if any
            if pool is not None:
                pool.close()

        return Live(gen(), pipe.checkpoint, close)

    def advance(state: Any, a: int, b: int) -> Any:
        del a
        # A protobuf whose last field holds JSON {"iter": batches in the epoch, "epoch_idx"}
        # (a state at an epoch's last batch stays in it): rewrite that field.
        epoch = (b - 1) // per_epoch
        found = re.search(rb'\{"iter": \d+, "epoch_idx": \d+\}', state)
        if found is None:
            raise ValueError(f"DALI checkpoint without its iteration: {state!r}")
        rest = state[found.end() :]  # the iterator's data: empty here
        old = state[found.start() : found.end()]
        field = b"\n" + varint(len(old)) + old + rest
        head = b"\x12" + varint(len(field))
        start = len(state) - len(head) - len(field)
        if state[start:] != head + field:
            raise ValueError(f"DALI checkpoint of an unknown layout: {state!r}")
        text = json.dumps({"iter": b - epoch * per_epoch, "epoch_idx": epoch}).encode()
        field = b"\n" + varint(len(text)) + text + rest
        return state[:start] + b"\x12" + varint(len(field)) + field

    return Side(f"DALI w={workers} (CPU)", "dali", workers, open_, advance, check=True)


def varint(v: int) -> bytes:
    """Protobuf's base-128 varint."""
    out = bytearray()
    while True:
        out.append(v & 0x7F | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def streaming_side(st: types.ModuleType, mds: Path, n: int, workers: int) -> Side:
    per_epoch = n // B  # batches an epoch gives, drop_last

    def open_(state: Any) -> Live:
        ds = st.StreamingDataset(local=str(mds), shuffle=True, shuffle_seed=SEED, batch_size=B)
        dl = st.StreamingDataLoader(ds, batch_size=B, num_workers=workers, drop_last=True)
        if state is not None:
            dl.load_state_dict(state)
        gen = epochs(dl)
        return Live((arrays(b) for b in gen), dl.state_dict, gen.close)

    def advance(state: Any, a: int, b: int) -> Any:
        del a
        return {**state, "epoch": b // per_epoch, "sample_in_epoch": b % per_epoch * B}

    return Side(f"streaming w={workers}", "streaming", workers, open_, advance, check=True)


def grain_loader_side(gp: types.ModuleType, path: Path, workers: int, threads: int | None) -> Side:
    def open_(state: Any) -> Live:
        src = GrainSource(path)
        read = (
            None if threads is None else gp.ReadOptions(num_threads=threads, prefetch_buffer_size=0)
        )
        loader = gp.DataLoader(
            data_source=src,
            sampler=gp.IndexSampler(
                len(src), shard_options=gp.NoSharding(), shuffle=True, num_epochs=None, seed=SEED
            ),
            operations=[gp.Batch(B, drop_remainder=True)],
            worker_count=workers,
            read_options=read,
        )
        it = iter(loader)
        if state is not None:
            it.set_state(state)
        return Live((arrays(b) for b in it), it.get_state, lambda: close_grain(it))

    def advance(state: Any, a: int, b: int) -> Any:
        s = json.loads(state)
        s["last_seen_indices"] = {k: v + (b - a) * B for k, v in s["last_seen_indices"].items()}
        return json.dumps(s, indent=4).encode()

    name = f"grain DataLoader w={workers}" + ("" if threads is None else f" threads={threads}")
    return Side(
        name, "grain", workers, open_, advance, check=threads is None,
        step_multiple=max(1, workers),
    )  # fmt: skip


def grain_dataset_side(gp: types.ModuleType, path: Path) -> Side:
    def open_(state: Any) -> Live:
        ds = gp.MapDataset.source(GrainSource(path)).shuffle(seed=SEED).repeat()
        it = iter(ds.batch(B, drop_remainder=True).to_iter_dataset())
        if state is not None:
            it.set_state(state)
        return Live((arrays(b) for b in it), it.get_state, lambda: close_grain(it))

    def advance(state: Any, a: int, b: int) -> Any:
        return {**state, "next_index": state["next_index"] + (b - a)}

    return Side("grain MapDataset w=0", "grain-dataset", 0, open_, advance, check=True)


def close_grain(it: Any) -> None:
    close = getattr(it, "close", None)
    if close is not None:
        close()
    del it
    gc.collect()  # its read threads and worker processes go with the iterator


# -- measuring -----------------------------------------------------------------------------
def digest_of(live: Live, n: int, first: list[np.ndarray[Any, Any]] | None = None) -> str:
    """SHA-256 of the next n batches (``first``, already taken, counts as one of them)."""
    h = hashlib.sha256()
    rest = islice(live.batches, n if first is None else n - 1)
    for batch in rest if first is None else [first, *rest]:
        live.consumed += batch is not first
        for a in batch:
            h.update(f"{a.dtype.str}{a.shape}".encode())
            h.update(np.ascontiguousarray(a).data)
    return h.hexdigest()[:12]


def trial(side: Side, seconds: float, first: bool) -> None:
    t0 = time.perf_counter()
    live = side.open(None)
    batch = next(live.batches)
    side.firsts.append(time.perf_counter() - t0)
    live.consumed = 1
    if first:  # steps 0..49 of a fresh run
        side.digest = digest_of(live, K, batch)
    else:
        live.take(WARM)  # enough for a fresh pipeline's first read-ahead to settle
    del batch
    n, t0 = 0, time.perf_counter()
    t1 = t0
    for _ in live.batches:  # the consumer takes each batch and does nothing with it
        n += 1
        t1 = time.perf_counter()
        if t1 - t0 >= seconds:
            break
    live.consumed += n
    side.rates.append(n / (t1 - t0))
    side.end_state, side.end_step = live.save(), live.consumed
    live.close()
    gc.collect()


def check_resume(side: Side, step: int, per_epoch: int) -> None:
    """Rerun, resume after a saved state, and the advance rule, on a fresh run.

    Twice: at ``step`` (inside the first epoch), and K/2 batches before the end of the
    second epoch, so that the K batches after the resume cross into the third and the
    advance from ``step`` crosses an epoch.
    """
    live = side.open(None)
    side.checks["rerun"] = digest_of(live, K) == side.digest
    half = step // 2 - (step // 2) % side.step_multiple
    cross = 2 * per_epoch - K // 2
    cross -= cross % side.step_multiple
    live.take(half - live.consumed)
    at_half = live.save()
    live.take(step - live.consumed)
    saved = live.save()
    expected = digest_of(live, K)
    live.take(cross - live.consumed)
    saved_x = live.save()
    expected_x = digest_of(live, K)
    live.close()
    side.checks["advance"] = same_state(side.advance(at_half, half, step), saved)
    side.checks["advance over an epoch"] = same_state(side.advance(saved, step, cross), saved_x)
    resumes = (("resume", saved, expected), ("resume over an epoch end", saved_x, expected_x))
    for name, state, want in resumes:
        live = side.open(state)
        side.checks[name] = digest_of(live, K) == want
        live.close()
        gc.collect()


def same_state(a: Any, b: Any) -> bool:
    if isinstance(a, bytes) and a[:1] == b"{":  # Grain's JSON (DALI's protobuf: bytes equal)
        return bool(json.loads(a) == json.loads(b))
    if isinstance(a, torch.Tensor):  # torchdata's generator states
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return (
            isinstance(b, dict) and a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
        )
    return bool(a == b)


def resume_cost(side: Side) -> None:
    a = side.end_step
    b = RESUME_STEP + (a - RESUME_STEP) % side.step_multiple
    side.resume_step = b
    if side.skip_resume:
        side.resume_s = statistics.median(side.firsts) + b / statistics.median(side.rates)
        side.resume_est = True
        return
    state = side.advance(side.end_state, a, b)
    t0 = time.perf_counter()
    live = side.open(state)
    next(live.batches)
    side.resume_s = time.perf_counter() - t0
    live.close()
    gc.collect()


# -- report --------------------------------------------------------------------------------
def yn(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "NO")


def report(sides: list[Side], base: Side) -> None:
    gb = B * (L + 1) * 4 / 1e9
    ref = statistics.median(base.rates)
    by_family: dict[str, list[Side]] = {}
    for s in sides:
        by_family.setdefault(s.family, []).append(s)
    out(
        "| loader | batches/s (min-max) | GB/s | headrace sync / it | first batch s "
        "| resume at 100k s | resume bit-exact | w0 = w2 | sha256 (50) |"
    )
    out("|---|---|---|---|---|---|---|---|---|")
    for s in sides:
        rate = statistics.median(s.rates)
        fam = by_family[s.family]
        w_same = len({x.digest for x in fam}) == 1 if len(fam) > 1 else None
        same = yn(w_same)
        if w_same is False and s.family not in CLAIM_WORKERS:
            same = "no (not claimed)"
        exact = None
        if s.checks:
            exact = all(ok for k, ok in s.checks.items() if not k.startswith("advance"))
        resume = "-" if s.resume_s is None else f"{s.resume_s:,.3f}"
        if s.resume_est:
            resume = f"~{s.resume_s:,.0f} (est.)"
        out(
            f"| {s.name} | {rate:,.0f} ({min(s.rates):,.0f}-{max(s.rates):,.0f}) "
            f"| {rate * gb:.3f} | {ref / rate:,.1f}x | {statistics.median(s.firsts):.3f} "
            f"| {resume} | {yn(exact)} | {same} | {s.digest} |"
        )


def claims_failed(sides: list[Side]) -> list[str]:
    """Determinism properties a loader claims and this run did not see."""
    bad = []
    by_family: dict[str, list[Side]] = {}
    for s in sides:
        by_family.setdefault(s.family, []).append(s)
        bad += [f"{s.name}: {k}" for k, ok in s.checks.items() if not ok]
    for fam in CLAIM_WORKERS:
        if len({x.digest for x in by_family.get(fam, [])}) > 1:
            bad.append(f"{fam}: its sides' first 50 batches differ (workers / sync vs async)")
    return bad


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="32 MiB file, 2 short trials (< 60 s)")
    p.add_argument("--root", type=Path, default=Path("/tmp/headrace-rivals"))
    p.add_argument("--trials", type=int, default=None)
    p.add_argument("--trial-s", type=float, default=None, help="seconds timed per trial")
    p.add_argument("--check-step", type=int, default=None, help="resume check's step")
    p.add_argument(
        "--only", nargs="*", default=None, help="families: headrace torch torchdata streaming grain"
    )
    a = p.parse_args()
    mib = 32 if a.quick else 256
    trials = a.trials or (2 if a.quick else 3)
    seconds = a.trial_s or (0.2 if a.quick else 1.0)
    step = a.check_step or (100 if a.quick else 300)
    torch.set_num_threads(1)

    sdl, tn, sdl_note = import_torchdata()
    dali, dali_note = import_dali()
    st, st_note = import_streaming()
    gp, gp_note = import_grain()
    out(
        f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}; headrace "
        f"{headrace.__version__}, numpy {np.__version__}, torch {torch.__version__}, "
        f"torchdata {version('torchdata')}, mosaicml-streaming {version('mosaicml-streaming')}, "
        f"grain {version('grain')}, nvidia-dali-cuda120 {version('nvidia-dali-cuda120')}"
    )
    if sdl_note:
        out(f"torchdata: SKIPPED: {sdl_note}")
    if dali_note:
        out(f"dali: SKIPPED: {dali_note}")
    if st_note:
        out(f"streaming: {'SKIPPED: ' if st is None else ''}{st_note}")
    if gp_note:
        out(f"grain: SKIPPED: {gp_note}")

    path = a.root / f"tokens-{mib}m.u32"
    gen_s = write_tokens(path, mib)
    warm(path)
    n = (path.stat().st_size // 4 - 1) // L
    out(
        f"data: {path} ({mib} MiB, {n:,} samples of {L + 1} tokens, "
        f"{n // B:,} batches an epoch), B={B} L={L}; generated in {gen_s:.1f} s"
    )

    sides = [
        headrace_side(path, "headrace Loader sync", prefetch=0),
        headrace_side(path, "headrace Loader async", prefetch=8),
        headrace_side(path, "headrace HeadraceDataLoader w=2", workers=2),
        torch_side(path, 0),
        torch_side(path, 2),
    ]
    if sdl is not None:
        sides += [stateful_side(sdl, path, n, 0), stateful_side(sdl, path, n, 2)]
    if tn is not None:
        sides += [nodes_side(tn, path, n, 0), nodes_side(tn, path, n, 2)]
    if st is not None:
        mds = a.root / f"mds-{mib}m"
        t0 = time.perf_counter()
        shutil.rmtree(mds, ignore_errors=True)
        m = np.memmap(path, dtype=np.uint32, mode="r")
        with st.MDSWriter(out=str(mds), columns={"tokens": f"ndarray:uint32:{L + 1}"}) as w:
            for i in range(n):
                w.write({"tokens": m[i * L : i * L + L + 1]})
        del m
        size = sum(f.stat().st_size for f in mds.iterdir())
        out(
            f"streaming prep: MDS conversion {time.perf_counter() - t0:.1f} s, "
            f"{size / 2**20:,.0f} MiB in {len(list(mds.glob('*.mds')))} shards"
        )
        sides += [streaming_side(st, mds, n, 0), streaming_side(st, mds, n, 2)]
    if gp is not None:
        sides += [
            grain_loader_side(gp, path, 0, None),
            grain_loader_side(gp, path, 0, 0),
            grain_loader_side(gp, path, 2, None),
            grain_dataset_side(gp, path),
        ]
    if dali is not None:
        sides += [dali_side(dali, path, n, 0), dali_side(dali, path, n, 2)]
    if a.only:
        sides = [s for s in sides if s.family.split("-")[0] in a.only]

    t_all = time.perf_counter()
    for t in range(trials):  # A B C ... A B C ...
        for s in sides:
            trial(s, seconds, first=t == 0)
        out(f"trial {t + 1}/{trials} done, {time.perf_counter() - t_all:.0f} s")
    for s in sides:
        if s.check and (s.workers == 0 or not a.quick):
            check_resume(s, step, n // B)
        resume_cost(s)
    out(f"checks and resumes done, {time.perf_counter() - t_all:.0f} s")

    out(
        f"\n{trials} trials of {seconds} s per side, alternating; resume checked at step "
        f"{step}; resume cost at step {RESUME_STEP:,} (Grain w=2: the nearest step of its "
        "worker round)\n"
    )
    report(sides, sides[0])
    for s in sides:
        if s.checks:
            out(f"{s.name}: " + ", ".join(f"{k} {yn(v)}" for k, v in s.checks.items()))
    bad = claims_failed(sides)
    for b in bad:
        out(f"FAILED (a property this loader claims): {b}")
    return 1 if bad else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
