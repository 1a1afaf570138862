"""The data, sources and per-rank script of ``test_resume_newest_s53.py``.

One process a rank (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set as
torchrun sets them; gloo on CPU): the test forks them (:func:`rank_process`); by hand::

    torchrun --standalone --nproc_per_node=3 _newest_hosts_s53.py ROOT OUT STATE_IN SAVE_AT WORKERS

Every rank reads each source through ``HeadraceDataLoader`` (``num_workers=2`` on the
ranks listed in ``WORKERS``, comma-separated; none elsewhere), from the state in
``STATE_IN`` (``-``: from step 0), to ``STEPS``; the slices are gathered to rank 0,
which writes the digest of each step's global batch, and the state every rank saved
at step ``SAVE_AT`` (each rank's, to compare), to ``OUT/run.json``.

A module of its own, not the test's: the worker processes (forkserver) import the
sources' transforms by name.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from headrace.formats import FileSource, TableSource, TokenSource, table_token_files
from headrace.pipeline import Mapped, Mixture
from headrace.testing import batch_digest
from headrace.transforms import RandomResizedCrop

L = 8  # context
B = 60  # global batch: divisible by 1, 2, 3, 4 and 5 hosts
STEPS = 8
SEED = 11
IGNORE = -100
CASES = ("sft", "images", "npz", "mixture")
NPZ_ROWS = (40, 33, 27)  # rows of each deflated NPZ file (no two alike)


def write_data(root: Path) -> Path:
    """Each case's files as its user's tools write them (datasets, Pillow, NumPy, pyarrow)."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    rng = np.random.default_rng(53)
    # (a) an SFT dataset of two shards: ids int32, labels int64, -100 on the prompt (a
    # row of none, too: its first label is an id, which targets="documents" hides).
    ids, labels = [], []
    for _ in range(70):
        k = int(rng.integers(3, 3 * L))
        prompt = int(rng.integers(0, k))
        row = rng.integers(1, 32_000, k).tolist()
        ids.append(row)
        labels.append([IGNORE] * prompt + row[prompt:])
    features = datasets.Features(
        {
            "input_ids": datasets.Sequence(datasets.Value("int32")),
            "labels": datasets.Sequence(datasets.Value("int64")),
        }
    )
    ds = datasets.Dataset.from_dict({"input_ids": ids, "labels": labels}, features=features)
    ds.save_to_disk(str(root / "sft"), num_shards=2)
    # (b) an ImageFolder tree of JPEGs and PNGs of several sizes and modes.
    for c, cls in enumerate(("cat", "dog", "emu")):
        (root / "images" / cls).mkdir(parents=True)
        for i in range(7 + c):
            h, w = (int(v) for v in rng.integers(10, 22, 2))
            im = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
            if i % 3 == 0:
                im.save(root / "images" / cls / f"{i}.png")
            elif i % 3 == 1:
                im.convert("RGBA" if c else "P").save(root / "images" / cls / f"{i}.PNG")
            else:
                (im.convert("L") if c == 2 else im).save(
                    root / "images" / cls / f"{i}.jpg", quality=90
                )
    # (c) deflated NPZ files of many samples (np.savez_compressed), uneven counts.
    (root / "npz").mkdir()
    for i, n in enumerate(NPZ_ROWS):
        x = rng.integers(0, 4, (n, 6, 6)).astype(np.uint8)
        np.savez_compressed(
            root / "npz" / f"part{i}.npz", x=x, y=np.arange(n, dtype=np.int64) + 1000 * i
        )
    # (d) a nanoGPT train.bin beside a Parquet table of tokenized rows.
    (root / "mix").mkdir()
    web = rng.integers(0, 32_000, 5_000).astype(np.uint16)
    web.tofile(root / "mix" / "train.bin")
    rows = [rng.integers(1, 32_000, int(rng.integers(4, 2 * L))).tolist() for _ in range(90)]
    table = pa.table({"input_ids": pa.array(rows, pa.list_(pa.int32()))})
    pq.write_table(table, root / "mix" / "chat.parquet", row_group_size=20)
    return root


def as_tokens(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """A padded table row as the token file's sample: x its first L ids, y the next."""
    ids = arrays["input_ids"].astype(np.int64)
    return {"x": np.ascontiguousarray(ids[:, :-1]), "y": np.ascontiguousarray(ids[:, 1:])}


def widened(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """The token file's uint16 as int64, as the table's rows are."""
    return {k: v.astype(np.int64) for k, v in arrays.items()}


CROP = RandomResizedCrop((8, 8))


def source(root: Path, case: str) -> tuple[Any, Any]:
    """The case's source and transform (None for none)."""
    if case == "sft":
        files = table_token_files(str(root / "sft"), "input_ids", labels="labels")
        src = TokenSource(
            files, context=L, positions="documents", targets="documents", ignore_index=IGNORE
        )
        return src, None
    if case == "images":
        return FileSource(root / "images", format="image", labels="folders"), CROP
    if case == "npz":
        return FileSource(
            root / "npz", format="npz", shuffle="samples", samples_per_file="header"
        ), None
    if case == "mixture":
        web = Mapped(TokenSource(root / "mix" / "train.bin", dtype="uint16", context=L), widened)
        table = TableSource(
            root / "mix" / "chat.parquet", columns=["input_ids"], width=L + 1, truncate=True
        )
        return Mixture(
            {"web": web, "chat": Mapped(table, as_tokens)}, [0.7, 0.3], batch_size=B
        ), None
    raise ValueError(case)


def rank_process(env: dict[str, str], log: str, *args: Any) -> None:
    """A rank as the test starts it: forked by the fork server, which imported torch once
    for every rank (an import of torch is most of a rank's start); ``env`` is torchrun's
    (``RANK``, ``WORLD_SIZE``, the rendezvous store's address), the output goes to ``log``."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.update(env)
    main(*args)


def main(root: Path, out: Path, state_in: str, save_at: int, workers: set[int]) -> None:
    import torch.distributed as dist

    from headrace.torch import HeadraceDataLoader, TorchDataset

    # A rank that failed leaves the others waiting in a gather: not for gloo's 30 minutes.
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    states_in = json.loads(Path(state_in).read_text()) if state_in != "-" else {}
    result: dict[str, Any] = {"world": world}
    for case in CASES:
        src, transform = source(root, case)
        ds = TorchDataset(
            src, batch_size=B, seed=SEED, steps=STEPS, chunk_steps=2, transform=transform
        )
        with HeadraceDataLoader(ds, num_workers=2 if rank in workers else 0) as dl:
            if case in states_in:
                dl.load_state_dict(states_in[case])
            digests, saved = [], None
            for batch in dl:
                local = {k: v.numpy() for k, v in batch.items()}
                parts: list[Any] = [None] * world
                dist.all_gather_object(parts, local)
                glued = {k: np.concatenate([p[k] for p in parts]) for k in local}
                digests.append(batch_digest([glued]))
                if dl.step == save_at:
                    saved = dl.state_dict()
            states: list[Any] = [None] * world
            dist.all_gather_object(states, saved)
        result[case] = {"d": digests, "states": states}
    if rank == 0:
        (out / "run.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    import _newest_hosts_s53  # by name: the workers unpickle its functions from it

    r, o, s, k, w = sys.argv[1:]
    _newest_hosts_s53.main(Path(r), Path(o), s, int(k), {int(v) for v in w.split(",") if v})
