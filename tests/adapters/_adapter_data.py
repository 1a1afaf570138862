"""Small token files and sources shared by the adapter tests and their subprocess scripts.

The fault-injecting sources live here (not in a test module) because worker
processes started with ``forkserver`` or ``spawn`` must import them by name.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from headrace.errors import DataError
from headrace.formats import PaddedRows, TokenSource
from headrace.pipeline import Mixture

L = 16
WINDOW = 16 * 1024  # bytes: a few windows per file, so batches cross windows
BATCH = 8
ROW_WIDTH = 24  # stored row width of the padded-row files (>= L + 1)


def write_tokens(root: Path) -> Path:
    """Token files ``a.bin``/``b.bin`` and two padded-row sets (``rows{0,1}.npy`` + masks)."""
    rng = np.random.default_rng(3)
    rng.integers(0, 1000, 20_000, dtype=np.uint32).tofile(root / "a.bin")
    rng.integers(0, 1000, 7_777, dtype=np.uint32).tofile(root / "b.bin")
    for i, rows in enumerate((300, 77)):
        lengths = rng.integers(2, ROW_WIDTH + 1, rows)
        tok = rng.integers(1, 1000, (rows, ROW_WIDTH), dtype=np.uint16)
        tok[np.arange(ROW_WIDTH) >= lengths[:, None]] = 0  # right padding with pad_id 0
        mask = (tok != 0) & (rng.random((rows, ROW_WIDTH)) < 0.8)  # some prompt tokens unmasked
        np.save(root / f"rows{i}.npy", tok)
        np.save(root / f"mask{i}.npy", mask.astype(np.uint8))
    return root


def token_source(root: Path, **kw: Any) -> TokenSource:
    return TokenSource(
        [root / "a.bin", root / "b.bin"],
        dtype="uint32",
        context=L,
        window_bytes=WINDOW,
        block_bytes=4096,
        **kw,
    )


def mask_tokens(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """A per-sample random masking transform (module level: workers import it by name)."""
    x = arrays["x"].copy()
    for row, rng in zip(x, samples.rngs(), strict=True):
        row[rng.random(row.shape[0]) < 0.25] = 0
    return {"x": x, "y": arrays["y"]}


IGNORE = -100  # the padded rows' ignored target, as torch's cross_entropy expects


def padded_mixture(root: Path) -> Mixture:
    rows = [  # rows of up to ROW_WIDTH tokens, cut to L + 1 by choice (truncate=True)
        PaddedRows(
            root / f"rows{i}.npy",
            root / f"mask{i}.npy",
            context=L,
            ignore_index=IGNORE,
            truncate=True,
        )
        for i in range(2)
    ]
    return Mixture(rows, [0.75, 0.25], batch_size=BATCH)


# Sources the replay tests run over, by name (a subprocess gets the name).
SOURCES: dict[str, Callable[[Path], object]] = {
    "padded-mixture": padded_mixture,
    "tokens": token_source,
}


class ShardError(Exception):
    """A user's exception whose ``__init__`` takes other arguments than its message: it
    pickles, but does not unpickle (``ShardError(message)`` misses ``code``)."""

    def __init__(self, path: str, code: int) -> None:
        super().__init__(f"{path}: bad shard, code {code}")
        self.path, self.code = path, code


class Faulty:
    """A token source that misbehaves when asked for any sample of step ``at``.

    ``how``: ``"raise"`` (a DataError), ``"raise-shard"`` (a :class:`ShardError`, which
    does not unpickle), ``"exit"`` (the process dies),
    ``"sleep"`` (every read takes 0.1 s from then on: for interrupting), or
    ``"hang"`` (the read takes an hour: a stuck network read, in a subprocess),
    ``"once"`` (a DataError the first time a process reads it, then none: a read that
    failed once), ``"late"`` (a DataError after 1 s: a read failing while the main
    process waits for something else), ``"eof"`` / ``"pipe"`` (an ``EOFError`` as
    ``np.load`` raises for an empty file / a ``BrokenPipeError``: errors a worker's own
    pipes raise too, which must not be taken for the main process closing them).
    """

    def __init__(self, root: Path, at: int, how: str, mark: Path | None = None) -> None:
        self.inner = token_source(root)
        self.at, self.how = at, how
        self.mark = mark  # touched as a read of step ``at`` begins: a test waits for it
        self.failed = False

    def fingerprint(self) -> dict[str, Any]:
        return self.inner.fingerprint()

    def read(self, seed: int, samples: Any) -> dict[str, Any]:
        if bool((np.asarray(samples) // BATCH >= self.at).any()):
            if self.mark is not None:
                self.mark.touch()
            if self.how == "raise" or (self.how == "once" and not self.failed):
                self.failed = True
                raise DataError(f"injected fault at step {self.at}")
            if self.how == "once":
                return self.inner.read(seed, samples)
            if self.how == "eof":
                raise EOFError("No data left in file")
            if self.how == "pipe":
                raise BrokenPipeError(32, "Broken pipe")
            if self.how == "raise-shard":
                raise ShardError("/data/shard-7.bin", 42)
            if self.how == "exit":
                os._exit(3)
            if self.how == "late":
                time.sleep(1.0)
                raise DataError(f"injected fault at step {self.at}")
            time.sleep(3600 if self.how == "hang" else 0.1)
        return self.inner.read(seed, samples)

    def close(self) -> None:
        self.inner.close()


class Unreopenable(Faulty):
    """A token source whose copy in a worker cannot reopen its files (they moved, say)."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        raise DataError("cannot reopen the token files in this process")


class Ragged:
    """A source whose width follows the number of samples read at once (the loader's chunk).

    Its batches change shape, which sends them through the pipe, pickled.
    (Not a valid source for comparing worker counts: chunks differ with them.)
    """

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": "ragged-test"}

    def read(self, seed: int, samples: Any) -> dict[str, Any]:
        s = np.asarray(samples, dtype=np.int64)
        width = 1 + s.size // BATCH % 3
        return {"v": np.repeat(s[:, None] * 10 + seed, width, axis=1)}


class Growing:
    """A source whose rows widen with the sample numbers: later chunks outgrow the ring's
    slots (sized from the first chunk), and its ``tag`` field holds Python strings.
    (Its width follows the chunk, so compare it with one worker, as :class:`Ragged`.)"""

    def __init__(self, objects: bool = False) -> None:
        self.objects = objects

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": "growing-test", "objects": self.objects}

    def read(self, seed: int, samples: Any) -> dict[str, Any]:
        s = np.asarray(samples, dtype=np.int64)
        width = 1 + int(s.max(initial=0)) // BATCH  # one column more per step
        out: dict[str, Any] = {"v": np.repeat(s[:, None] * 10 + seed, width, axis=1)}
        if self.objects:
            out["tag"] = np.array([f"s{n}" for n in s.tolist()], dtype=object)
        return out


class ForeignOrder:
    """Big-endian rows that widen fast (later chunks outgrow the ring's slots and are
    pickled) beside a little-endian field and samples of several shapes, big-endian."""

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": "foreign-order-test"}

    def read(self, seed: int, samples: Any) -> dict[str, Any]:
        s = np.asarray(samples, dtype=np.int64)
        width = 1 + 8 * (int(s.max(initial=0)) // BATCH)
        v = np.repeat(s[:, None] * 10 + seed, width, axis=1).astype(">i4")
        r = np.empty(len(s), dtype=object)
        for i, n in enumerate(s.tolist()):
            r[i] = np.full(1 + n % 3 + width, n / 4, dtype=">f8")
        return {"v": v, "w": v.astype("<u2"), "r": r}


def box_centres(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """Each image's box centres ``(n, 2)``, as an ``object`` array of per-sample arrays
    and no ``centre_shape`` (what a user's transform builds with a list of arrays)."""
    boxes = arrays["boxes"]
    centres = np.empty(len(samples), dtype=object)
    for i, b in enumerate(boxes):
        centres[i] = (b[:, :2] + b[:, 2:]) / 2
    return {**arrays, "centre": centres}


def polygons(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """Each image's outline as a Python list of floats (COCO's segmentation polygons),
    in an ``object`` array: no array, so no tensor."""
    poly = np.empty(len(samples), dtype=object)
    for i, n in enumerate(samples.numbers.tolist()):
        poly[i] = [float(n), 0.0, float(n), 1.0, 0.0, 1.0]
    return {**arrays, "poly": poly}


def halve_some(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """Every other image (by sample number) at half its height and width, a per-sample
    scale jitter that passes the source's ``image_shape`` on unchanged (now stale)."""
    images = np.empty(len(samples), dtype=object)
    for i, n in enumerate(samples.numbers.tolist()):
        img = arrays["image"][i]
        images[i] = img[::2, ::2] if n % 2 else img
    return {**arrays, "image": images}


def run_script(script: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python SCRIPT`` with this folder on its path (it imports this module); its
    output captured; ``timeout``: a bound on a hang, not on speed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=timeout
    )


def torchrun(nproc: int, script: str, *args: object) -> None:
    """``python -m torch.distributed.run --standalone`` of ``script`` (beside this file)
    on ``nproc`` CPU processes; fails the test with the tail of their output."""
    launch(["torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"], script, *args)


def launch(launcher: list[str], script: str, *args: object, **env: str) -> None:
    """``python -m`` ``launcher`` (its module and options) of ``script`` (beside this
    file), with ``env`` added to the environment; fails the test with the tail of the
    processes' output."""
    here = Path(__file__).parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(here), *sys.path]),
        "OMP_NUM_THREADS": "1",
        **env,
    }
    cmd = [sys.executable, "-m", *launcher, str(here / script), *map(str, args)]
    # A guard against a hang, not a bound: a Lightning launch of 2 ranks and 4 variants
    # took 77 s at load 13 (2c, 2026-12-07), and the suite runs beside other jobs.
    done = subprocess.run(cmd, env=env, timeout=300, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def ranks(world: int, script: str, *args: object) -> None:
    """``script`` (beside this file) on ``world`` CPU processes that join as torchrun's
    ranks join (env://, the store of torchrun's agent: TORCHELASTIC_USE_AGENT_STORE),
    the store held here, without the agent: its process imports torch too, 2.1 s CPU a
    launch (2c, 2026-12-08), and headrace reads none of its variables (the launchers
    themselves: test_torchrun.py, test_frameworks*.py). Fails the test with the tail of
    each failed rank's output; the others are stopped, as the agent stops them."""
    from torch.distributed import TCPStore

    here = Path(__file__).parent
    store = TCPStore("127.0.0.1", 0, world, is_master=True, wait_for_workers=False)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(here), *sys.path]),
        "OMP_NUM_THREADS": "1",
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(store.port),
        "TORCHELASTIC_USE_AGENT_STORE": "True",
    }
    cmd = [sys.executable, str(here / script), *map(str, args)]
    with tempfile.TemporaryDirectory() as logs:
        outs = [Path(logs, f"{rank}.log").open("w+b") for rank in range(world)]
        procs = [
            subprocess.Popen(
                cmd,
                env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            for rank, out in enumerate(outs)
        ]
        # launch()'s hang guard: until all are done, one has failed (the others would
        # wait for it in a collective) or 300 s have passed.
        deadline = time.monotonic() + 300
        try:
            while not any(p.poll() for p in procs) and time.monotonic() < deadline:
                if all(p.returncode == 0 for p in procs):
                    break
                time.sleep(0.1)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
        failed = []
        for rank, (p, out) in enumerate(zip(procs, outs, strict=True)):
            out.seek(0)
            if p.returncode != 0:
                tail = out.read()[-3000:].decode(errors="replace")
                failed.append(f"rank {rank} of {world}: exit {p.returncode}:\n{tail}")
            out.close()
    assert not failed, "\n".join(failed)


def widen(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """Token fields as int64 (a dtype gloo can broadcast, as a model's inputs often are)."""
    return {k: v.astype(np.int64) for k, v in arrays.items()}
