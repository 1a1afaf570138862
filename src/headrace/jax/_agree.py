"""Processes' loaders compared at the start of each iteration, through jax.distributed's
key-value store: loaders that would read rows of different global batches are refused
on every process alike."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from headrace.errors import ConfigError
from headrace.pipeline import Loader

__all__ = ["check_agreement", "spans_processes"]


# What every process's loader must agree on, packed as 8-byte ints, then a digest of the
# rest (the data's fingerprint, where a changed batch size took over, the step pattern).
_AGREED = ("seed", "step", "batch_size", "steps", "epochs")
# The iteration starts checked in this process, numbered (the same on every process).
_CHECKS = itertools.count()
# How long a process waits for the others to start iterating (then refuses, naming them).
_WAIT_MS = 10 * 60_000


def _coordination_client() -> Any:
    """jax.distributed's client of its coordination service (as orbax reaches it: jax
    has no public name for it), or None."""
    try:
        from jax._src import distributed
    except ImportError:
        return None
    return getattr(distributed.global_state, "client", None)


def spans_processes(sharding: Any) -> bool:
    """Whether ``sharding`` (or a dict of them) lays a batch over every process: only
    then does every process make the loader, and can they all be asked together."""
    shardings = sharding.values() if isinstance(sharding, Mapping) else [sharding]
    held: set[int] = set()
    for s in shardings:
        held |= {int(d.process_index) for d in getattr(s, "device_set", ())}
    return bool(jax.process_count() > 1 and len(held) == jax.process_count())


def _agreement(
    loader: Loader, share: tuple[int, int] | None
) -> np.ndarray[Any, np.dtype[np.uint8]]:
    st = loader.state_dict()
    ints = [st["seed"], loader.step, loader.batch_size, loader.steps, loader.epochs]
    rest = json.dumps(
        [
            st["fingerprint"],
            st.get("origin"),
            loader.step_stride,
            loader.step_offset,
            loader.host_order,
        ],
        sort_keys=True,
    )
    packed = np.array([-1 if v is None else v for v in ints], dtype="<i8").view(np.uint8)
    digest = np.frombuffer(hashlib.blake2b(rest.encode(), digest_size=16).digest(), np.uint8)
    rank_world = share or (loader.rank, loader.world_size)
    shared = np.array(rank_world, dtype="<i8").view(np.uint8)
    return np.concatenate([packed, digest, shared])


# Where each part lies in a process's posted row: the agreed values, then its share.
_SAME = slice(0, 8 * len(_AGREED) + 16)
_SHARE = slice(_SAME.stop, _SAME.stop + 16)


def check_agreement(
    loader: Loader, kind: str = "JaxLoader", share: tuple[int, int] | None = None
) -> None:
    """Refuse, on every process alike, loaders that would read rows of different global
    batches: another seed (``seed + process_index``), another step (a state loaded on
    one process only), other data or weights. Each process reads only its own rows, so
    nothing else would tell; each iteration's start tells, through jax.distributed's
    key-value store (no device collective: a loader iterated in a thread of its own
    cannot interleave with the training step's collectives differently on each
    process). ``kind`` names the loaders in the messages (``JaxLoader``, ``numpy_loader``);
    ``share`` stands for the loader's ``(rank, world_size)`` in the check that the
    processes' slices cover the batch (``(0, 1)``: a sharding's rows, which do)."""
    client = _coordination_client()
    if client is None:  # processes jax.distributed did not start: nothing to ask
        return
    mine = _agreement(loader, share)
    me, count = jax.process_index(), jax.process_count()
    number = next(_CHECKS)  # iterations start in the same order on every process
    client.key_value_set(f"headrace/jax/agree/{number}/{me}", mine.tobytes().hex())
    rows = []
    for p in range(count):
        if p == me:
            rows.append(mine)
            continue
        try:
            got = client.blocking_key_value_get(f"headrace/jax/agree/{number}/{p}", _WAIT_MS)
        except Exception as exc:  # jax's own error type for a deadline passed
            raise ConfigError(
                f"process {p} of {count} did not start iterating its {kind} within "
                f"{_WAIT_MS / 1000:g} s of this one (process {me}, iteration start "
                f"{number} of this run's JaxLoaders and numpy_loaders): every process "
                f"iterates the same loaders in the same order ({type(exc).__name__}: {exc})"
            ) from exc
        rows.append(np.frombuffer(bytes.fromhex(got), dtype=np.uint8))
    if number:
        # Every process has posted this start, so every one has read the last: the
        # store keeps two keys a process, not one an iteration of the whole run.
        with contextlib.suppress(Exception):
            client.key_value_delete(f"headrace/jax/agree/{number - 1}/{me}")
    every = np.stack(rows)
    if (every[:, _SAME] == every[0, _SAME]).all():
        _check_shares(every[:, _SHARE].copy().view("<i8"), kind)
        return
    differ = []
    for i, name in enumerate(_AGREED):
        values = every[:, 8 * i : 8 * i + 8].copy().view("<i8").reshape(-1).tolist()
        if len(set(values)) > 1:
            shown = [None if v == -1 and name in ("steps", "epochs") else v for v in values]
            differ.append(f"{name} {_by_value(shown)}")
    if len({row[40 : _SAME.stop].tobytes() for row in every}) > 1:
        groups = _by_value([row[40 : _SAME.stop].tobytes().hex()[:12] for row in every])
        differ.append(f"data or sampling config (fingerprint, host_order, origin) {groups}")
    raise ConfigError(
        f"the {len(every)} processes' {kind}s disagree ({'; '.join(differ)}; this is "
        f"process {jax.process_index()}): each reads only its own rows, so they would be "
        "rows of different global batches. Build the loader alike on every process: the "
        "same seed (not seed + process_index), data, weights and steps, and load the same "
        "state on every process (not on process 0 alone). Refused on every process, "
        "before any read."
    )


def _check_shares(shares: np.ndarray[Any, np.dtype[np.int64]], kind: str) -> None:
    """Refuse slices whose union is not the global batch: a rank no process reads (two
    processes given ``rank=0``, or ``world_size`` other than theirs) leaves its rows
    unread and another's read twice. A rank several processes read is kept (processes
    of one model-parallel group read the same rows)."""
    ranks, worlds = shares[:, 0].tolist(), shares[:, 1].tolist()
    unread = sorted(set(range(max(worlds))) - set(ranks))
    if len(set(worlds)) == 1 and not unread:
        return
    raise ConfigError(
        f"the {len(ranks)} processes' {kind}s read rank {_by_value(ranks)} (world_size "
        f"{_by_value(worlds)}; this is process {jax.process_index()}): "
        + (f"{_ranks(unread)} read by no process, " if unread else "")
        + "so some rows of each global batch would be read twice and others never. Leave "
        "out rank and world_size (they default to jax.process_index() and "
        "jax.process_count()), or give each process its own rank, 0 to world_size - 1. "
        "Refused on every process, before any read."
    )


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")
    return f"rank {shown} is" if len(ranks) == 1 else f"ranks {shown} are"


def _by_value(values: list[Any]) -> str:
    """``values`` (one a process) as ``5 on processes [0, 2], 6 on [1]``."""
    where: dict[Any, list[int]] = {}
    for p, v in enumerate(values):
        where.setdefault(v, []).append(p)
    return ", ".join(
        f"{v} on {'processes ' if i == 0 else ''}{ps}" for i, (v, ps) in enumerate(where.items())
    )
