"""Processes' loaders compared at the start of each iteration, through jax.distributed's
key-value store: loaders that would read rows of different global batches are refused
on every process alike; processes that do not come are named in warnings while they are
waited for, then in the refusal at the end of the wait (``HEADRACE_JAX_WAIT_S``)."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from headrace._warn import warn_user
from headrace.errors import ConfigError
from headrace.pipeline import Loader

__all__ = ["check_agreement", "spans_processes", "wait_seconds"]


# What every process's loader must agree on, packed as 8-byte ints, then a digest of the
# rest (the data's fingerprint, where a changed batch size took over, the step pattern).
_AGREED = ("seed", "step", "batch_size", "steps", "epochs")
# The iteration starts checked in this process, numbered (the same on every process).
_CHECKS = itertools.count()
# How long a process waits for the others to start iterating, in seconds (then refuses,
# naming them); 10 minutes unless the environment says.
_WAIT_ENV = "HEADRACE_JAX_WAIT_S"
_WAIT_S = 600.0
# The first warning that a process is waited for, at most (then at doubling intervals).
_FIRST_WARNING_S = 30.0
# How often a waiting process looks whether the ones it waits for have exited, in seconds.
_POLL_S = 1.0
# Where a process that exits posts why (see _post_exit).
_EXITED = "headrace/jax/exited/"


def _coordination_client() -> Any:
    """jax.distributed's client of its coordination service (as orbax reaches it: jax
    has no public name for it), or None."""
    try:
        from jax._src import distributed
    except ImportError:
        return None
    return getattr(distributed.global_state, "client", None)


def _post_exit() -> None:
    """Post, as this process exits, that it did and why (its uncaught exception), so that
    processes waiting for its loader refuse at once, naming it and the error, instead of
    waiting the whole ``HEADRACE_JAX_WAIT_S`` (10 minutes): a host whose data path was
    missing raised before its loader, then waited in jax's shutdown, alive to jax's
    heartbeats, while the others warned that it had not come. Registered when this module
    is imported, after jax's own exit handler, so it runs before jax shuts down."""
    client = _coordination_client()
    if client is None:
        return
    with contextlib.suppress(Exception):  # an exit must not fail for this
        from jax._src import distributed

        me = int(distributed.global_state.process_id)
        error = getattr(sys, "last_value", None)
        why = (
            "without an uncaught exception (sys.exit?)"
            if error is None
            else f"{type(error).__name__}: {error}"
        )
        client.key_value_set(f"{_EXITED}{me}", why[:1000])


atexit.register(_post_exit)


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
    wait = wait_seconds()  # refused before posting: the others then wait, and say so
    me, count = jax.process_index(), jax.process_count()
    number = next(_CHECKS)  # iterations start in the same order on every process
    client.key_value_set(f"headrace/jax/agree/{number}/{me}", mine.tobytes().hex())
    posted = _posted(client, number, kind, wait, me, count)
    rows = [
        mine if p == me else np.frombuffer(bytes.fromhex(posted[p]), np.uint8) for p in range(count)
    ]
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


def wait_seconds() -> float:
    """How long a process waits for the others' loaders: ``HEADRACE_JAX_WAIT_S`` seconds,
    or 10 minutes where unset or empty."""
    value = os.environ.get(_WAIT_ENV, "").strip()
    if not value:
        return _WAIT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(
            f"{_WAIT_ENV} must be a positive number of seconds (got {value!r}): how long a "
            "process waits for the others to start iterating their JaxLoaders and "
            f"numpy_loaders; set it to e.g. 60, or unset it for the default "
            f"({_WAIT_S:g} s)."
        )
    return seconds


def _posted(
    client: Any, number: int, kind: str, total: float, me: int, count: int
) -> dict[int, str]:
    """Every other process's row of iteration start ``number`` (this is process ``me`` of
    ``count``), as each posts it: waited for ``total`` seconds in all, with a warning
    naming the processes not yet arrived after a short while (30 s at most), again at
    doubling intervals, and a refusal at the end naming them. A process that stopped
    before its loader, or one made on some processes only, otherwise left the others
    silent for the whole wait."""
    prefix = f"headrace/jax/agree/{number}/"
    this = (
        f"this {kind} (iteration start {number} of this run's JaxLoaders and "
        "numpy_loaders, which every process starts in the same order)"
    )
    posted: dict[int, str] = {}
    start = time.monotonic()
    interval = min(_FIRST_WARNING_S, total / 4)
    warn_at = start + interval
    for p in range(count):
        while p != me and p not in posted:
            until = min(warn_at, start + total, time.monotonic() + _POLL_S)
            timeout_ms = max(1, math.ceil((until - time.monotonic()) * 1000))
            try:
                posted[p] = client.blocking_key_value_get(f"{prefix}{p}", timeout_ms)
                continue
            except Exception as exc:  # jax's own error type, for a deadline passed too
                if "DEADLINE_EXCEEDED" not in str(exc):  # the store itself failed
                    exc.add_note(
                        f"while process {me} waited for process {p} to start iterating {this}"
                    )
                    raise
                error = exc
            posted.update(_arrived(client, prefix))
            absent = [q for q in range(count) if q != me and q not in posted]
            exited = {q: why for q, why in _arrived(client, _EXITED).items() if q in absent}
            if exited:
                said = "; ".join(
                    f"process {q} of {count} exited ({why})" for q, why in exited.items()
                )
                raise ConfigError(
                    f"{said} before it started iterating {this}, so process {me} refuses "
                    "rather than wait for it: its log says more. Make and iterate the same "
                    "loaders on every process, and mend what stopped it (a data path missing "
                    "on that host, an error before its loader)."
                ) from error
            missing = _listed("process", absent)
            waited = time.monotonic() - start
            if time.monotonic() < warn_at and waited < total:
                continue  # looked for exits; not yet time to warn
            if waited >= total:
                raise ConfigError(
                    f"{missing} of {count} did not start iterating {this} within {total:g} s "
                    f"of this one (process {me}; {_WAIT_ENV} sets the wait). {_WHY_MISSING}"
                ) from error
            warn_user(
                f"process {me} of {count} has waited {waited:.1f} s for {missing} to start "
                f"iterating {this}; it refuses after {total:g} s ({_WAIT_ENV}). {_WHY_MISSING}",
                varies=True,
            )
            interval *= 2
            warn_at = time.monotonic() + interval
    return posted


# Why a process is waited for, and the fixes, for the messages of _posted.
_WHY_MISSING = (
    "A process that stopped before its loader (its log says why), a loader made or "
    "iterated on some processes only, or loaders iterated in another order leave the "
    "others waiting: make and iterate the same loaders on every process; for a loader of "
    "some processes only (an evaluation on process 0), give numpy_loader a rank and "
    "world_size of your own, world_size under jax.process_count() (not compared)."
)


def _arrived(client: Any, prefix: str) -> dict[int, str]:
    """The rows posted so far under ``prefix``, by process (none where the store cannot
    say)."""
    try:
        found = client.key_value_dir_get(prefix)
    except Exception:  # the wait's own error says what went wrong
        return {}
    return {int(key.rsplit("/", 1)[1]): value for key, value in found}


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
        + (f"{_listed('rank', unread)} {_is(unread)} read by no process, " if unread else "")
        + "so some rows of each global batch would be read twice and others never. Leave "
        "out rank and world_size (they default to jax.process_index() and "
        "jax.process_count()), or give each process its own rank, 0 to world_size - 1. "
        "Refused on every process, before any read."
    )


def _listed(noun: str, items: list[int]) -> str:
    """``rank 3``, ``ranks 1, 2``: at most 8 shown, then how many in all."""
    shown = ", ".join(map(str, items[:8])) + (
        f", ... ({len(items)} in all)" if len(items) > 8 else ""
    )
    return f"{noun} {shown}" if len(items) == 1 else f"{noun}s {shown}"


def _is(items: list[int]) -> str:
    return "is" if len(items) == 1 else "are"


def _by_value(values: list[Any]) -> str:
    """``values`` (one a process) as ``5 on processes [0, 2], 6 on [1]``."""
    where: dict[Any, list[int]] = {}
    for p, v in enumerate(values):
        where.setdefault(v, []).append(p)
    return ", ".join(
        f"{v} on {'processes ' if i == 0 else ''}{ps}" for i, (v, ps) in enumerate(where.items())
    )
