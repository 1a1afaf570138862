"""A :class:`~headrace.pipeline.Loader`'s arguments, checked before it holds anything.

Each bad value is a :class:`~headrace.errors.ConfigError` naming the argument and
what it got: a NumPy integer is taken as Python's (sizes often come from arrays),
a bool, float or string is not (``batch_size=32.0`` is a typo more often than a
wish).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from headrace._warn import warn_user
from headrace.errors import ConfigError
from headrace.pipeline._transform import check_transform

__all__ = [
    "LAUNCHERS",
    "check_source",
    "checked_seed",
    "checked_stall_warn_s",
    "checked_steps",
    "host_place",
    "integer",
    "launched",
]


def integer(name: str, value: object) -> int:
    """``value`` as an int (Python or NumPy integers; not bool, float or str)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(f"{name} must be an integer (got {value!r}).")
    return int(value)


def checked_seed(seed: object) -> int:
    """A seed as the plan takes it: an integer in ``[0, 2**63)``."""
    value = integer("seed", seed)
    if not 0 <= value < 2**63:
        raise ConfigError(f"seed must be an integer in [0, 2**63) (got seed={value}).")
    return value


#: Launchers that tell each process how many they started and which one it is:
#: (launcher, count variable, rank variable); srun's count is its step's (below).
LAUNCHERS = (
    ("torchrun", "WORLD_SIZE", "RANK"),  # and accelerate, DeepSpeed, Lightning
    ("Open MPI", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
    ("MPICH", "PMI_SIZE", "PMI_RANK"),
    ("srun", "SLURM_NTASKS", "SLURM_PROCID"),
)


def launched() -> tuple[str, int, str] | None:
    """(launchers, processes, variables) where the environment says a launcher started
    this process as one of several: the first launcher's count, every one's names and
    variables; None otherwise. SLURM counts only under srun (``SLURM_STEP_ID`` set): an
    sbatch script is one process, whatever ``--ntasks`` put in ``SLURM_NTASKS``."""
    env = os.environ
    seen: list[tuple[str, int, str]] = []
    for name, count_var, rank_var in LAUNCHERS:
        if name == "srun":
            if "SLURM_STEP_ID" not in env:
                continue
            if "SLURM_STEP_NUM_TASKS" in env:  # this step's tasks, not the allocation's
                count_var = "SLURM_STEP_NUM_TASKS"
        count = env.get(count_var, "").strip()
        if count.isdigit() and int(count) > 1:
            names = [count_var, rank_var] + (["SLURM_STEP_ID"] if name == "srun" else [])
            shown = ", ".join(f"{v}={env.get(v, '?')}" for v in names)
            seen.append((name, int(count), shown))
    if not seen:
        return None
    return ", ".join(x[0] for x in seen), seen[0][1], ", ".join(x[2] for x in seen)


def host_place(rank: object, world_size: object) -> tuple[int, int]:
    """``rank`` and ``world_size`` as ints; neither given: host 0 of 1, which a process
    that a launcher (:data:`LAUNCHERS`: torchrun, accelerate, DeepSpeed, Open MPI, MPICH,
    srun) started as one of several is told about: each of its ranks would read the
    whole global batch, the same rows as the others, without a word."""
    if rank is None and world_size is None:
        found = launched()
        if found is not None:
            names, count, variables = found
            warn_user(
                f"Loader: no rank or world_size given, so this process reads the whole "
                f"global batch as host 0 of 1, but its launcher ({names}) started it as one "
                f"of {count} ({variables}): every rank would read the same rows. "
                "Pass rank= and world_size= (torch.distributed.get_rank(), "
                "get_world_size() once init_process_group has run, or the rank and count "
                "variables above), or use headrace.torch.TorchDataset, which takes "
                "them from torch.distributed; give world_size=1 to read the whole batch "
                "here on purpose.",
                RuntimeWarning,
            )
    elif rank is None or world_size is None:
        # One without the other: world_size=8 alone made every rank rank 0, reading the
        # same slice, without a word (a TorchDataset refused it).
        given, other = ("rank", "world_size") if world_size is None else ("world_size", "rank")
        value = integer(given, rank if world_size is None else world_size)
        if value != (0 if world_size is None else 1):
            raise ConfigError(
                f"{given}={value} given without {other}: give both rank and world_size "
                "(torch.distributed.get_rank() and get_world_size(), or "
                "jax.process_index() and process_count()), or neither."
            )
    rank = 0 if rank is None else rank
    return integer("rank", rank), integer("world_size", 1 if world_size is None else world_size)


#: What a migrating script passes where a source goes, and the source that reads it.
_READ_WITH = {
    "path": "a path is not a source: open it with the source for its format, "
    "TokenSource(path, context=...) for token files (train.bin), TableSource(path, "
    "columns=[...], width=...) for Parquet, Arrow and save_to_disk folders, "
    "PaddedRows(tokens.npy, ...) or FileSource(folder, format=...)",
    "datasets": "a Hugging Face dataset is read from its files: TableSource(ds, "
    "columns=['input_ids'], width=...) gives one padded row a sample, TokenSource("
    "table_token_files(ds, 'input_ids'), context=...) packs its rows (docs/start.md)",
    "array": "an array in memory is not a source: write it to a file (np.save, or "
    "arr.tofile('train.bin')) and read that, TokenSource(path, context=...) for a token "
    "stream, PaddedRows(path.npy, ...) for rows",
}


def _read_with(source: Any) -> str:
    """For a value a source was expected in, the way to read it, if it is a common one."""
    if isinstance(source, str | os.PathLike):
        return _READ_WITH["path"]
    if type(source).__module__.split(".")[0] == "datasets":
        return _READ_WITH["datasets"]
    if isinstance(source, np.memmap) and source.filename is not None:  # nanoGPT's get_batch
        return (
            f"a np.memmap is not a source: read its file, TokenSource({str(source.filename)!r}, "
            f"dtype='{source.dtype.name}', context=...)"
        )
    if isinstance(source, np.ndarray):
        return _READ_WITH["array"]
    return ""


def check_source(source: Any, transform: Any) -> None:
    """The source has the Source protocol's methods; a transform takes ``(arrays, samples)``."""
    if isinstance(source, type):  # Loader(PaddedRows, ...): its methods are functions
        raise ConfigError(
            f"source is the class {source.__name__}, not a source: make one first, e.g. "
            f"Loader({source.__name__}(...), batch_size=...)."
        )
    if not all(callable(getattr(source, m, None)) for m in ("read", "fingerprint")):
        way = _read_with(source)
        raise ConfigError(
            f"source must have read(seed, samples) and fingerprint() (the Source "
            f"protocol: a TokenSource, PaddedRows, FileSource, Mixture, ...); got "
            f"{type(source).__name__}{': ' + way if way else ''}."
        )
    if transform is not None:
        check_transform("transform", transform)


def checked_steps(
    prefetch: object,
    chunk_steps: object,
    chunk_bytes: object,
    steps: object,
    step_stride: object,
    step_offset: object,
) -> tuple[int, int, int, int | None, int, int]:
    """The read-ahead and step arguments as ints, in range."""
    prefetch, chunk_steps, chunk_bytes = (
        integer("prefetch", prefetch),
        integer("chunk_steps", chunk_steps),
        integer("chunk_bytes", chunk_bytes),
    )
    end = None if steps is None else integer("steps", steps)
    stride, offset = integer("step_stride", step_stride), integer("step_offset", step_offset)
    if prefetch < 0 or chunk_steps < 1 or chunk_bytes < 1:
        raise ConfigError(
            "prefetch must be >= 0, chunk_steps >= 1 and chunk_bytes >= 1 (got "
            f"{prefetch=}, {chunk_steps=}, {chunk_bytes=})."
        )
    if end is not None and end < 0:
        raise ConfigError(
            f"steps must be None (never ends) or >= 0 (got {end}): it is the global "
            "step at which iteration ends, not a count."
        )
    if stride < 1 or not 0 <= offset < stride:
        raise ConfigError(
            f"step_offset must be in [0, step_stride) (got step_offset={offset}, "
            f"step_stride={stride})."
        )
    return prefetch, chunk_steps, chunk_bytes, end, stride, offset


def checked_stall_warn_s(value: object) -> float | None:
    """``stall_warn_s`` as a float > 0 (Python or NumPy numbers, as ``integer``
    takes), or ``None`` (no warnings)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ConfigError(f"stall_warn_s must be a number of seconds or None (got {value!r}).")
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(
            f"stall_warn_s must be > 0 seconds, or None for no warnings (got {value!r})."
        )
    return float(value)
