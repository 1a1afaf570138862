"""Which rows of a global batch each process's devices hold under a sharding.

Read off the sharding itself (``addressable_devices_indices_map`` for this process,
``devices_indices_map`` for every process), so the headrace host slice and the array
layout cannot disagree; a layout refused for one process is refused by all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax

from headrace.errors import ConfigError
from headrace.pipeline._loader_args import integer

__all__ = [
    "checked_batch_size",
    "checked_sharding",
    "fields_blocks",
    "fields_rows",
    "held_rows",
    "host_blocks",
    "host_rows",
]


def checked_batch_size(batch_size: object) -> int:
    """``batch_size`` as an int, refused unless a positive integer (Python's or NumPy's),
    before jax sees it: jax caches a sharding's index map by shape, and ``(8.0,)`` is
    ``(8,)`` to the cache, so a batch size of 8.0 once tried left slices of floats for
    every later one of 8 on that sharding (a TypeError each, for the whole process)."""
    value = integer("batch_size", batch_size)
    if value < 1:
        raise ConfigError(f"batch_size must be >= 1 (got {value}).")
    return value


# jax.sharding.AbstractMesh is no older jax's (headrace takes jax >= 0.4.30).
_MESHES = tuple(
    m for m in (jax.sharding.Mesh, getattr(jax.sharding, "AbstractMesh", None)) if m is not None
)


def checked_sharding(sharding: object, name: str = "sharding") -> None:
    """Refuse what is no ``jax.sharding.Sharding`` (nor has its index map), saying what to
    make of it (a spec, a mesh and a device were each an AttributeError from inside
    headrace)."""
    if isinstance(sharding, jax.sharding.Sharding) or hasattr(
        sharding, "addressable_devices_indices_map"
    ):
        return
    if isinstance(sharding, jax.sharding.PartitionSpec):
        got = (
            f"a PartitionSpec {sharding!r}): a spec names mesh axes, not devices: give "
            f"NamedSharding(mesh, {sharding!r})"
        )
    elif isinstance(sharding, _MESHES):
        axis = sharding.axis_names[0] if sharding.axis_names else "data"
        got = (
            f"a Mesh of axes {dict(sharding.shape)}): give NamedSharding(mesh, P({axis!r})) "
            "to lay the batch axis over a mesh axis (P: jax.sharding.PartitionSpec)"
        )
    elif isinstance(sharding, jax.Device):
        got = f"a device {sharding!r}): give SingleDeviceSharding(device) to put batches on it"
    else:
        shown = "None" if sharding is None else f"a {type(sharding).__name__} {sharding!r:.200}"
        got = f"{shown}): e.g. NamedSharding(mesh, P('data')) to lay the batch axis over a mesh"
    whole = ", or a dict of one per field" if name == "sharding" else ""
    raise ConfigError(f"{name} must be a jax.sharding.Sharding{whole} (got {got}.")


def _index_map(sharding: Any, batch_size: int, everywhere: bool = False) -> dict[Any, Any]:
    """The sharding's index of each of this process's devices (``everywhere``: of every
    process's devices) for a global batch of ``batch_size`` rows."""
    # The sharding's rank is unknown before the first batch is read: try the
    # ranks a batch can have, with a placeholder length on the other axes that any
    # split of an axis divides: 5040, times what the device count adds (an axis
    # split over 32 devices, context parallel, does not divide 5040, and the
    # refusal blamed the batch size).
    checked_sharding(sharding)
    batch_size = checked_batch_size(batch_size)
    devices = len(getattr(sharding, "device_set", ()) or ())
    other = math.lcm(5040, devices or 1)
    method = "devices_indices_map" if everywhere else "addressable_devices_indices_map"
    last: Exception | None = None
    indivisible: Exception | None = None
    split: int | None = None  # how many ways the sharding splits the batch axis
    for ndim in range(1, 9):
        try:
            shape = (batch_size,) + (other,) * (ndim - 1)
            return dict(getattr(sharding, method)(shape))
        except (ValueError, TypeError, IndexError) as exc:
            last = exc
            # A rank the sharding does not fit is IndexError/TypeError; a ValueError
            # (jax's IndivisibleError) at the smallest rank that fits says why the
            # batch itself does not: report that one, not the placeholders of the last.
            if indivisible is None and type(exc).__name__ == "IndivisibleError":
                indivisible = exc
                split = _batch_split(sharding, (other,) * ndim)
            continue
    if indivisible is not None:
        raise _indivisible(sharding, batch_size, split, devices, indivisible) from indivisible
    raise ConfigError(f"cannot read the batch rows of sharding {sharding!r}: {last}")


def _batch_split(sharding: Any, shape: tuple[int, ...]) -> int | None:
    """How many ways ``sharding`` splits the batch axis (of a ``shape`` every split
    divides), or ``None`` where it cannot tell."""
    every = getattr(sharding, "devices_indices_map", None)  # else a duck-typed one's own
    method = every or sharding.addressable_devices_indices_map
    try:
        indices = method(shape).values()
    except (ValueError, TypeError, IndexError):
        return None
    return len({(s.start, s.stop) for s in (i[0] for i in indices if i)}) or None


def _indivisible(
    sharding: Any, batch_size: int, split: int | None, devices: int, exc: Exception
) -> ConfigError:
    """The refusal of a batch the sharding's split of its batch axis does not divide,
    naming the split, the batch sizes near this one it divides, and the splits that
    divide this one (a run resumed on another device count keeps its batch size so):
    jax's own error named the sharding twice and none of them."""
    if split is None:  # not read off the sharding: jax's error says it
        return ConfigError(
            f"a global batch of {batch_size} rows cannot be laid out by sharding "
            f"{sharding!r}: {exc}; give a batch size that the sharding's batch axis divides."
        )
    below = batch_size // split * split
    sizes = f"{below} or {below + split}" if below else f"{split}"
    ways = [str(d) for d in range(1, max(devices, 1) + 1) if batch_size % d == 0]
    listed = f"{', '.join(ways[:-1])} or {ways[-1]}" if len(ways) > 1 else ways[0]
    return ConfigError(
        f"a global batch of {batch_size} rows cannot be laid out by sharding {sharding!r}: "
        f"it splits the batch axis {split} ways, which do not divide {batch_size}. Give a "
        f"batch size that is a multiple of {split} ({sizes}; a state saved with another "
        f"batch size resumes at its first sample not read), or a mesh that splits it "
        f"{listed} ways (the sizes of the mesh axes the PartitionSpec names for the batch "
        "axis, multiplied; the other mesh axes replicate it)."
    )


def _rows(indices: Any, batch_size: int) -> list[tuple[int, int]]:
    rows = []
    for index in indices:
        s = index[0] if index else slice(None)
        rows.append((s.start or 0, batch_size if s.stop is None else s.stop))
    return rows


def _row_slices(sharding: Any, batch_size: int) -> list[tuple[int, int]]:
    return _rows(_index_map(sharding, batch_size).values(), batch_size)


def _refuse_none(rows: list[tuple[int, int]], sharding: Any) -> None:
    """Refuse a sharding under which this process's devices hold no rows."""
    if not rows:
        raise ConfigError(
            f"this process's devices hold no rows of the global batch under sharding "
            f"{sharding!r} (its mesh has none of them); make the loader only in processes "
            "whose devices the sharding's mesh includes."
        )


def _share(rows: list[tuple[int, int]], batch_size: int, whose: str) -> tuple[int, int]:
    """``(rank, world_size)`` of ``rows`` (``whose``: the process, for errors)."""
    rows = sorted(set(rows))
    lo, hi = rows[0][0], rows[0][1]
    for a, b in rows[1:]:
        if a > hi:
            raise ConfigError(
                f"{whose} devices hold rows {rows} of the global batch of {batch_size}: "
                "not one contiguous block; order the mesh's batch axis by process: a mesh "
                "jax.make_mesh built, and the mesh axis that runs over processes first where "
                "the batch axis takes several (P(('data', 'model')), not P(('model', "
                f"'data')), when 'data' runs over processes){_JAX_READS}."
            )
        hi = max(hi, b)
    n = hi - lo
    if batch_size % n or lo % n:
        raise ConfigError(
            f"{whose} devices hold rows [{lo}, {hi}) of the global batch of "
            f"{batch_size}: not an equal share of it (expected a multiple of {n} rows "
            f"starting at a multiple of {n}); a Loader reads each process's rows as an equal "
            "share of the global batch: give every process the same number of the mesh's "
            f"devices along its batch axis{_JAX_READS}."
        )
    return lo // n, batch_size // n


# What the refusals of host_rows (numpy_loader's rows) add: JaxLoader reads such rows.
_JAX_READS = (
    ", or use JaxLoader, which reads them (a Loader for each block of rows, the blocks "
    "joined in row order, as jax.make_array_from_process_local_data takes them)"
)


def held_rows(sharding: Any, batch_size: int) -> list[tuple[int, int]]:
    """The rows of a global batch this process's devices hold under ``sharding``, as
    sorted ``[lo, hi)`` blocks, neighbours joined: what its local data holds, in order,
    for ``jax.make_array_from_process_local_data``."""
    runs: list[tuple[int, int]] = []
    for a, b in sorted(set(_row_slices(sharding, batch_size))):
        if runs and a <= runs[-1][1]:
            runs[-1] = (runs[-1][0], max(runs[-1][1], b))
        else:
            runs.append((a, b))
    return runs


def host_blocks(sharding: Any, batch_size: int) -> list[tuple[int, int]]:
    """``(rank, world_size)`` of each Loader that reads this process's rows under
    ``sharding``, in row order: one where they are an equal share of the global batch
    (:func:`host_rows`), else one for each block of rows (a process holding 3 of 4
    devices along the batch axis; rows interleaved with another process's, as
    ``P(('model', 'data'))`` with ``'data'`` over processes lays them out)."""
    runs = held_rows(sharding, batch_size)
    _refuse_none(runs, sharding)
    # Blocks of g rows: every row boundary of the layout falls on one.
    g = math.gcd(batch_size, *(x for run in runs for x in run))
    blocks = []
    for a, b in runs:
        n = b - a
        if batch_size % n == 0 and a % n == 0:
            blocks.append((a // n, batch_size // n))
        else:
            blocks.extend((i, batch_size // g) for i in range(a // g, b // g))
    return blocks


def fields_blocks(sharding: Any, batch_size: int) -> list[tuple[int, int]]:
    """:func:`host_blocks` of one sharding, or of a dict of them (one per field), which
    must all give this process the same rows."""
    if not isinstance(sharding, Mapping):
        return host_blocks(sharding, batch_size)
    _check_fields(sharding, batch_size, held_rows)
    return host_blocks(next(iter(sharding.values())), batch_size)


def _check_other_processes(sharding: Any, batch_size: int) -> None:
    """Refuse here too a layout another process refuses: else this process goes on to
    its first collective and waits there for one that has stopped (gloo gave up after
    30 s; a TPU slice may wait far longer)."""
    if jax.process_count() == 1 or not hasattr(sharding, "devices_indices_map"):
        return
    by_process: dict[int, list[Any]] = {}
    for device, index in _index_map(sharding, batch_size, everywhere=True).items():
        by_process.setdefault(device.process_index, []).append(index)
    me = jax.process_index()
    for p, indices in sorted(by_process.items()):
        if p == me:
            continue
        try:
            _share(_rows(indices, batch_size), batch_size, f"process {p}'s")
        except ConfigError as exc:
            raise ConfigError(
                f"{exc} Every process refuses this layout (this is process {me} of "
                f"{jax.process_count()}), so that none waits in a collective for the others."
            ) from None


def host_rows(sharding: Any, batch_size: int) -> tuple[int, int]:
    """``(rank, world_size)`` of this process's rows of a global batch under ``sharding``.

    The rows this process's devices hold must be one contiguous block of
    ``batch_size // world_size`` rows starting at ``rank * batch_size //
    world_size`` (a mesh whose batch axis runs over processes in order, as
    ``jax.make_mesh`` builds it). Replicated batches give ``(0, 1)``: every
    process reads the whole batch. A layout refused for another process (read off
    the sharding's global device map) is refused here too, so that no process goes
    on without it.
    """
    rows = _row_slices(sharding, batch_size)
    _refuse_none(rows, sharding)
    share = _share(rows, batch_size, "this process's")
    _check_other_processes(sharding, batch_size)
    return share


def fields_rows(sharding: Any, batch_size: int) -> tuple[int, int]:
    """:func:`host_rows` of one sharding, or of a dict of them (one per field), which
    must all give this process the same rows."""
    if not isinstance(sharding, Mapping):
        return host_rows(sharding, batch_size)
    found = _check_fields(sharding, batch_size, host_rows)
    return next(iter(found.values()))  # type: ignore[no-any-return]


def _check_fields(sharding: Mapping[str, Any], batch_size: int, rows_of: Any) -> dict[str, Any]:
    """``rows_of`` each field's sharding, refused where they differ."""
    if not sharding:
        raise ConfigError(
            "sharding is an empty dict: give one sharding per field of the batch (or one "
            "sharding for all)."
        )
    for name, s in sharding.items():
        checked_sharding(s, f"sharding[{name!r}]")
    found = {name: rows_of(s, batch_size) for name, s in sharding.items()}
    if len({repr(v) for v in found.values()}) > 1:
        rows = ", ".join(
            f"rows {_shown(held_rows(s, batch_size))} for {name!r}" for name, s in sharding.items()
        )
        raise ConfigError(
            f"the fields' shardings give this process different rows of the global batch of "
            f"{batch_size}: {rows}; each process reads one slice of a step, so lay out every "
            "field's batch axis alike (replicate a field inside the jitted step, e.g. with "
            "jax.lax.with_sharding_constraint, if it must be whole)."
        )
    return found


def _shown(runs: list[tuple[int, int]]) -> str:
    return ", ".join(f"[{a}, {b})" for a, b in runs)
