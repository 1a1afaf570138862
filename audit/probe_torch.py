"""Probe 3: the torch adapter across worker counts, with saves and resumes between counts.

Sources: a padded-row Mixture, a FileSource (NPZ, 4 samples per file), a Mixture of
two FileSources, tokens. B=8, 60 steps. Reference: the bare Loader.
* HeadraceDataLoader with 0/1/2/3 workers == reference;
* save after k batches with a workers, resume with b workers (fresh dataset, fresh
  loader, state through torch.save/torch.load) == reference[k:];
* stock DataLoader(ds, batch_size=None, num_workers=k) + ds.state_at(own count);
* torchdata StatefulDataLoader(num_workers=k) save/resume with the same k, and with
  another k (what happens?).

PYTHONPATH=src:audit python audit/probe_torch.py [name ...]
"""

from __future__ import annotations

import io
import sys
from itertools import islice
from typing import Any

import common
import torch

from headrace.pipeline import Loader
from headrace.torch import HeadraceDataLoader, TorchDataset

B = 8
SEED = 3
STEPS = 60


def make(name: str) -> Any:
    return {
        "mixture-rows": lambda: common.mixture_rows(B),
        "npz": lambda: common.files("npz"),
        "mixture-files": lambda: common.mixture_files(B),
        "tokens": common.tokens,
    }[name]()


def np_digest(batch: dict[str, Any]) -> str:
    return common.digest(
        {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
    )


def reference(name: str) -> list[str]:
    with Loader(make(name), batch_size=B, seed=SEED) as loader:
        return [common.digest(b) for b in islice(loader, STEPS)]


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf)


def hdl(
    name: str, workers: int, state: dict[str, Any] | None, n: int
) -> tuple[list[str], dict[str, Any]]:
    ds = TorchDataset(make(name), batch_size=B, seed=SEED)
    with HeadraceDataLoader(ds, num_workers=workers) as dl:
        if state is not None:
            dl.load_state_dict(state)
        got = [np_digest(b) for b in islice(dl, n)]
        return got, dl.state_dict()


def check(label: str, got: list[str], want: list[str], problems: list[str]) -> None:
    if got != want:
        i = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        problems.append(
            f"{label}: diverges at batch {i} (got {len(got)} batches, want {len(want)})"
        )


def main(names: list[str]) -> int:
    fails = 0
    for name in names or ["mixture-rows", "npz", "mixture-files", "tokens"]:
        problems: list[str] = []
        ref = reference(name)
        for w in (0, 1, 2, 3):
            got, _ = hdl(name, w, None, STEPS)
            check(f"HeadraceDataLoader({w} workers)", got, ref, problems)
        for (a, b), k in zip([(0, 3), (2, 1), (3, 2), (1, 0), (2, 3)], [13, 7, 33, 32, 1]):
            _, st = hdl(name, a, None, k)
            got, _ = hdl(name, b, roundtrip(st), STEPS - k)
            check(f"save at {k} with {a} workers, resume with {b}", got, ref[k:], problems)
        # stock DataLoader with the user's own step count
        from torch.utils.data import DataLoader

        for w in (0, 2, 3):
            ds = TorchDataset(make(name), batch_size=B, seed=SEED)
            ds.load_state_dict(ds.state_at(11))
            dl = DataLoader(
                ds,
                batch_size=None,
                num_workers=w,
                multiprocessing_context="forkserver" if w else None,
            )
            got = [np_digest(x) for x in islice(dl, 20)]
            check(f"stock DataLoader({w} workers) from state_at(11)", got, ref[11:31], problems)
            del dl
        # torchdata
        from torchdata.stateful_dataloader import StatefulDataLoader

        for w1, w2 in ((0, 0), (2, 2), (3, 3), (2, 3), (0, 2), (2, 0)):
            ds = TorchDataset(make(name), batch_size=B, seed=SEED)
            sdl = StatefulDataLoader(
                ds,
                batch_size=None,
                num_workers=w1,
                multiprocessing_context="forkserver" if w1 else None,
            )
            it = iter(sdl)
            first = [np_digest(next(it)) for _ in range(13)]
            st = roundtrip(sdl.state_dict())
            del it, sdl
            check(f"StatefulDataLoader({w1}) first 13", first, ref[:13], problems)
            ds2 = TorchDataset(make(name), batch_size=B, seed=SEED)
            sdl2 = StatefulDataLoader(
                ds2,
                batch_size=None,
                num_workers=w2,
                multiprocessing_context="forkserver" if w2 else None,
            )
            try:
                sdl2.load_state_dict(st)
                got = [np_digest(x) for x in islice(sdl2, 20)]
                check(
                    f"StatefulDataLoader save with {w1}, resume with {w2}",
                    got,
                    ref[13:33],
                    problems,
                )
            except Exception as exc:  # noqa: BLE001
                line = (
                    f"StatefulDataLoader save with {w1}, resume with {w2}: raised "
                    f"{type(exc).__name__}: {str(exc)[:200]}"
                )
                if w1 == w2:
                    problems.append(line)
                else:  # torchdata's own rule (documented): same worker count
                    print("    note:", line)
            del sdl2
        fails += bool(problems)
        print(f"{'OK  ' if not problems else 'FAIL'} {name}", flush=True)
        for p in problems:
            print("   ", p)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
