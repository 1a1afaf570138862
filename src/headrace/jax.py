"""JAX adapter: each process's slice of a step becomes one global ``jax.Array``.

A process reads only the rows of the global batch that its own devices hold
under the batch ``sharding``; which rows those are is read off the sharding
itself (``addressable_devices_indices_map``), so the headrace host slice and
the array layout cannot disagree. ``jax.make_array_from_process_local_data``
then assembles the global array without moving data between processes.
Nothing coordinates the processes: every plan is a pure function of
``(seed, step)``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from headrace._messages import framework_missing, object_field

try:
    import jax
except ModuleNotFoundError as exc:
    if exc.name != "jax":  # one of an installed jax's own dependencies: its error says which
        raise
    raise framework_missing("headrace.jax", "jax") from exc

from headrace._closing import Closing
from headrace.errors import ConfigError, DataError
from headrace.pipeline import Batch, Loader, LoaderStats, Source
from headrace.plan import array_state

__all__ = ["JaxLoader", "array_state", "host_rows", "make_global_batch", "numpy_loader"]


def _index_map(sharding: Any, batch_size: int, everywhere: bool = False) -> dict[Any, Any]:
    """The sharding's index of each of this process's devices (``everywhere``: of every
    process's devices) for a global batch of ``batch_size`` rows."""
    # The sharding's rank is unknown before the first batch is read: try the
    # ranks a batch can have, with a placeholder length on the other axes
    # (5040 divides evenly over any likely mesh axis).
    method = "devices_indices_map" if everywhere else "addressable_devices_indices_map"
    last: Exception | None = None
    indivisible: Exception | None = None
    for ndim in range(1, 9):
        try:
            shape = (batch_size,) + (5040,) * (ndim - 1)
            return dict(getattr(sharding, method)(shape))
        except (ValueError, TypeError, IndexError) as exc:
            last = exc
            # A rank the sharding does not fit is IndexError/TypeError; a ValueError
            # (jax's IndivisibleError) at the smallest rank that fits says why the
            # batch itself does not: report that one, not the placeholders of the last.
            if indivisible is None and type(exc).__name__ == "IndivisibleError":
                indivisible = exc
            continue
    if indivisible is not None:
        raise ConfigError(
            f"a global batch of {batch_size} rows cannot be laid out by sharding "
            f"{sharding!r}: {indivisible}; give a batch size that the sharding's batch "
            "axis divides."
        ) from indivisible
    raise ConfigError(f"cannot read the batch rows of sharding {sharding!r}: {last}")


def _rows(indices: Any, batch_size: int) -> list[tuple[int, int]]:
    rows = []
    for index in indices:
        s = index[0] if index else slice(None)
        rows.append((s.start or 0, batch_size if s.stop is None else s.stop))
    return rows


def _row_slices(sharding: Any, batch_size: int) -> list[tuple[int, int]]:
    return _rows(_index_map(sharding, batch_size).values(), batch_size)


def _share(rows: list[tuple[int, int]], batch_size: int, whose: str) -> tuple[int, int]:
    """``(rank, world_size)`` of ``rows`` (``whose``: the process, for errors)."""
    rows = sorted(set(rows))
    lo, hi = rows[0][0], rows[0][1]
    for a, b in rows[1:]:
        if a > hi:
            raise ConfigError(
                f"{whose} devices hold rows {rows} of the global batch of {batch_size}: "
                f"not one contiguous block; order the mesh's batch axis by process "
                f"(jax.make_mesh does)."
            )
        hi = max(hi, b)
    n = hi - lo
    if batch_size % n or lo % n:
        raise ConfigError(
            f"{whose} devices hold rows [{lo}, {hi}) of the global batch of "
            f"{batch_size}: not an equal share of it (expected a multiple of {n} rows "
            f"starting at a multiple of {n}); headrace reads each process's rows as an equal "
            "share of the global batch: give every process the same number of the mesh's "
            "devices along its batch axis."
        )
    return lo // n, batch_size // n


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
    if not rows:
        raise ConfigError(
            f"this process's devices hold no rows of the global batch under sharding "
            f"{sharding!r} (its mesh has none of them); make the loader only in processes "
            "whose devices the sharding's mesh includes."
        )
    share = _share(rows, batch_size, "this process's")
    _check_other_processes(sharding, batch_size)
    return share


def _fields_rows(sharding: Any, batch_size: int) -> tuple[int, int]:
    """:func:`host_rows` of one sharding, or of a dict of them (one per field), which
    must all give this process the same rows."""
    if not isinstance(sharding, Mapping):
        return host_rows(sharding, batch_size)
    if not sharding:
        raise ConfigError(
            "sharding is an empty dict: give one sharding per field of the batch (or one "
            "sharding for all)."
        )
    found = {name: host_rows(s, batch_size) for name, s in sharding.items()}
    if len(set(found.values())) > 1:
        rows = ", ".join(
            f"rows [{r * batch_size // w}, {(r + 1) * batch_size // w}) for {name!r}"
            for name, (r, w) in found.items()
        )
        raise ConfigError(
            f"the fields' shardings give this process different rows of the global batch of "
            f"{batch_size}: {rows}; each process reads one slice of a step, so lay out every "
            "field's batch axis alike (replicate a field inside the jitted step, e.g. with "
            "jax.lax.with_sharding_constraint, if it must be whole)."
        )
    return next(iter(found.values()))


def make_global_batch(batch: Batch, sharding: Any, batch_size: int) -> dict[str, jax.Array]:
    """This process's rows of each array, assembled into global ``jax.Array`` s.

    ``sharding`` lays out every field, or is a dict of one sharding per field (the
    batch's fields exactly). A field of fewer dimensions than its ``PartitionSpec``
    names (a mixture's 1-D ``source`` beside ``(B, L)`` tokens under
    ``P("data", None)``) is laid out by the spec's leading entries: its batch axis as
    the others'.
    """
    make: Any = jax.make_array_from_process_local_data  # untyped in some jax releases
    per_field = isinstance(sharding, Mapping)
    if per_field and batch.keys() != sharding.keys():
        unsharded = [f"no sharding for {k!r}" for k in sorted(batch.keys() - sharding.keys())]
        unknown = [f"no field {k!r}" for k in sorted(sharding.keys() - batch.keys())]
        raise ConfigError(
            f"the batch has fields {sorted(batch)} and the sharding dict names "
            f"{sorted(sharding)}: {'; '.join(unsharded + unknown)}; give one sharding per "
            "field (or one sharding for all)."
        )
    out = {}
    for name, value in batch.items():
        a = _jaxable(name, value)
        shape = (batch_size, *np.shape(a)[1:])
        field_sharding = _for_ndim(sharding[name] if per_field else sharding, len(shape))
        try:
            out[name] = make(field_sharding, a, shape)
        except Exception as exc:
            raise _not_laid_out(name, a, field_sharding, batch_size, exc) from exc
    return out


def _jaxable(name: str, a: Any) -> Any:
    """``a`` as jax can take it without changing a value: another byte order made this
    machine's (jax refuses ``>u2`` and ``>f4``); a type jax has no array for refused by
    name; 64-bit integers that jax would keep as 32-bit ones (``jax_enable_x64`` off)
    refused where a value does not fit, since jax wraps them silently, and 64-bit floats
    where a finite value would become ``inf`` in 32 bits."""
    if not isinstance(a, np.ndarray):
        return a
    if a.dtype == object:
        raise DataError(
            f"{object_field(name, a.flat)}, which make no jax array (jax has no ragged "
            "arrays): give them one shape with a transform (headrace.transforms.RandomCrop, "
            "RandomResizedCrop, or your own padding); images of several channel counts "
            "take one with FileSource(..., image_mode='RGB'); strings: turn them into "
            "numbers with a transform, or leave them out of the batch"
        )
    # ml_dtypes' numbers (bfloat16, float8_*, int4) are "V" to NumPy, and jax's own.
    extended = a.dtype.kind == "V" and bool(jax.numpy.issubdtype(a.dtype, jax.numpy.number))
    if a.dtype.kind not in "biufc" and not extended:
        raise DataError(
            f"field {name!r} has dtype {a.dtype}, which jax has no array type for (objects, "
            "strings, structured and datetime arrays): turn it into numbers with a "
            "transform or leave it out of the batch"
        )
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    kept = np.dtype(jax.dtypes.canonicalize_dtype(a.dtype))
    if a.dtype.kind in "fc" and kept.itemsize < a.dtype.itemsize:
        return _narrowed_floats(name, a, kept)
    if a.dtype.kind in "iu" and kept.itemsize < a.dtype.itemsize and a.size:
        lo, hi, fits = a.min(), a.max(), np.iinfo(kept)
        if lo < fits.min or hi > fits.max:
            raise DataError(
                f"field {name!r} holds {a.dtype} values in [{lo}, {hi}], beyond {kept}, which "
                "jax keeps them as without 64-bit types: they would wrap; enable them with "
                "jax.config.update('jax_enable_x64', True), or narrow the field with a "
                "transform"
            )
    return a


def _narrowed_floats(name: str, a: np.ndarray[Any, Any], kept: np.dtype[Any]) -> Any:
    """``a`` (float64 or complex128) as ``kept`` (float32, complex64), as jax would cast it
    without 64-bit types (values rounded), refusing a finite value that would become
    ``inf``: beyond float32's range (3.4e38) jax's cast makes it ``inf`` without a word.
    Cast here, once, so jax has nothing left to cast."""
    with np.errstate(over="ignore"):  # the overflow is found below, by value
        narrow = a.astype(kept)
    parts = [(narrow, a)] if a.dtype.kind == "f" else [(narrow.real, a.real), (narrow.imag, a.imag)]
    for got, was in parts:
        grew = np.isinf(got)
        if not grew.any():  # the usual case: one pass over the narrowed field
            continue
        grew &= ~np.isinf(was)  # an inf already in the data stays one
        if grew.any():
            at = tuple(int(i) for i in np.argwhere(grew)[0])
            count = int(grew.sum())
            value, largest = a[at].item(), float(np.finfo(kept).max)
            raise DataError(
                f"field {name!r} holds {a.dtype} value {value!r} at index {list(at)} of "
                f"this process's rows ({count} value{'s' if count > 1 else ''} in all), "
                f"beyond {kept}'s range (largest {largest:.8g}), which jax keeps {a.dtype} "
                "as without 64-bit types: it would become inf; enable them with "
                "jax.config.update('jax_enable_x64', True), or scale or clip the field with "
                "a transform"
            )
    return narrow


def _for_ndim(sharding: Any, ndim: int) -> Any:
    """``sharding`` with its ``PartitionSpec`` cut to ``ndim`` entries, where longer
    (a ``NamedSharding``: the others are the caller's to fit)."""
    if isinstance(sharding, jax.sharding.NamedSharding) and len(sharding.spec) > ndim:
        return _cut(sharding, ndim)
    return sharding


@lru_cache(maxsize=64)  # every batch of a run asks for the same few (hashable) shardings
def _cut(sharding: Any, ndim: int) -> Any:
    cut: Any = jax.sharding.PartitionSpec  # untyped in some jax releases
    return sharding.update(spec=cut(*sharding.spec[:ndim]))


def _not_laid_out(name: str, a: Any, sharding: Any, batch_size: int, exc: Exception) -> ConfigError:
    """Why a field did not become a global array, naming it (jax's errors do not)."""
    rank, world = host_rows(sharding, batch_size)
    lo, hi = rank * batch_size // world, (rank + 1) * batch_size // world
    rows = np.shape(a)[0] if np.ndim(a) else 0
    if rows != hi - lo:
        return ConfigError(
            f"field {name!r} has {rows} rows here; this process holds rows [{lo}, {hi}) of "
            f"the global batch of {batch_size} under sharding {sharding!r}: expected "
            f"{hi - lo} (each process passes its own rows, as numpy_loader gives them)."
        )
    return ConfigError(
        f"field {name!r} of local shape {np.shape(a)} (global {(batch_size, *np.shape(a)[1:])}) "
        f"cannot be laid out by sharding {sharding!r}: {type(exc).__name__}: {exc}"
    )


def numpy_loader(
    source: Source,
    *,
    batch_size: int,
    seed: int = 0,
    rank: int | None = None,
    world_size: int | None = None,
    sharding: Any = None,
    **loader_kwargs: Any,
) -> Loader:
    """A plain NumPy :class:`~headrace.pipeline.Loader` of this process's slice.

    With ``sharding`` (one, or a dict per field), the slice is the rows this process's
    devices hold under it, as :class:`JaxLoader` reads them: what
    :func:`make_global_batch` with that sharding expects. Otherwise ``rank``/
    ``world_size`` default to ``jax.process_index()`` and ``jax.process_count()``.
    """
    if (rank is None) != (world_size is None):
        raise ConfigError(
            f"give both rank and world_size, or neither (got {rank=}, {world_size=})."
        )
    if sharding is not None:
        if rank is not None:
            raise ConfigError(
                f"give rank and world_size, or a sharding, not both (got {rank=}, "
                f"{world_size=} and a sharding, whose rows say them)."
            )
        # Not process_index(): a mesh need not place processes along its batch axis in
        # that order, and rows of another place would be laid out without a word.
        rank, world_size = _fields_rows(sharding, batch_size)
    if rank is None or world_size is None:
        rank, world_size = jax.process_index(), jax.process_count()
    return Loader(
        source, batch_size=batch_size, seed=seed, rank=rank, world_size=world_size, **loader_kwargs
    )


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


def _spans_processes(sharding: Any) -> bool:
    """Whether ``sharding`` (or a dict of them) lays a batch over every process: only
    then does every process make the loader, and can they all be asked together."""
    shardings = sharding.values() if isinstance(sharding, Mapping) else [sharding]
    held: set[int] = set()
    for s in shardings:
        held |= {int(d.process_index) for d in getattr(s, "device_set", ())}
    return bool(jax.process_count() > 1 and len(held) == jax.process_count())


def _agreement(loader: Loader) -> np.ndarray[Any, np.dtype[np.uint8]]:
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
    return np.concatenate([packed, digest])


def _check_agreement(loader: Loader) -> None:
    """Refuse, on every process alike, loaders that would read rows of different global
    batches: another seed (``seed + process_index``), another step (a state loaded on
    one process only), other data or weights. Each process reads only its own rows, so
    nothing else would tell; each iteration's start tells, through jax.distributed's
    key-value store (no device collective: a loader iterated in a thread of its own
    cannot interleave with the training step's collectives differently on each
    process)."""
    client = _coordination_client()
    if client is None:  # processes jax.distributed did not start: nothing to ask
        return
    mine = _agreement(loader)
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
                f"process {p} of {count} did not start iterating its JaxLoader within "
                f"{_WAIT_MS / 1000:g} s of this one (process {me}, iteration start "
                f"{number} of this run's JaxLoaders): every process iterates the same "
                f"loaders in the same order ({type(exc).__name__}: {exc})"
            ) from exc
        rows.append(np.frombuffer(bytes.fromhex(got), dtype=np.uint8))
    every = np.stack(rows)
    if (every == every[0]).all():
        return
    differ = []
    for i, name in enumerate(_AGREED):
        values = every[:, 8 * i : 8 * i + 8].copy().view("<i8").reshape(-1).tolist()
        if len(set(values)) > 1:
            shown = [None if v == -1 and name in ("steps", "epochs") else v for v in values]
            differ.append(f"{name} {_by_value(shown)}")
    if len({row[40:].tobytes() for row in every}) > 1:
        groups = _by_value([row[40:].tobytes().hex()[:12] for row in every])
        differ.append(f"data or sampling config (fingerprint, host_order, origin) {groups}")
    raise ConfigError(
        f"the {len(every)} processes' JaxLoaders disagree ({'; '.join(differ)}; this is "
        f"process {jax.process_index()}): each reads only its own rows, so they would be "
        "rows of different global batches. Build the loader alike on every process: the "
        "same seed (not seed + process_index), data, weights and steps, and load the same "
        "state on every process (not on process 0 alone). Refused on every process, "
        "before any read."
    )


def _by_value(values: list[Any]) -> str:
    """``values`` (one a process) as ``5 on processes [0, 2], 6 on [1]``."""
    where: dict[Any, list[int]] = {}
    for p, v in enumerate(values):
        where.setdefault(v, []).append(p)
    return ", ".join(
        f"{v} on {'processes ' if i == 0 else ''}{ps}" for i, (v, ps) in enumerate(where.items())
    )


class JaxLoader(Closing):
    """Global batches as ``jax.Array`` s laid out by ``sharding`` (one for every field, or
    a dict of one per field); each process reads its rows.

    State (``state_dict``/``load_state_dict``) is the loader's: a small dict
    of ints and strings, saved beside the model (e.g. an orbax JSON item) and
    valid on any process count, and with another global batch size (the
    :class:`~headrace.pipeline.Loader`'s rule: it goes on at the first sample
    not read).
    """

    def __init__(
        self,
        source: Source,
        *,
        batch_size: int,
        sharding: Any,
        seed: int = 0,
        **loader_kwargs: Any,
    ) -> None:
        given = sorted({"rank", "world_size"} & loader_kwargs.keys())
        if given:
            raise ConfigError(
                f"JaxLoader reads rank and world_size off the sharding (this process's rows "
                f"of the batch); leave out {', '.join(given)}, or use numpy_loader(...) and "
                "make_global_batch(...) to choose them yourself."
            )
        rank, world_size = _fields_rows(sharding, batch_size)
        self.sharding = sharding
        self.batch_size = batch_size
        self._ask_processes = _spans_processes(sharding)
        self.loader = Loader(
            source,
            batch_size=batch_size,
            seed=seed,
            rank=rank,
            world_size=world_size,
            **loader_kwargs,
        )

    def __iter__(self) -> Iterator[dict[str, jax.Array]]:
        loader = self.loader
        if self._ask_processes:
            _check_agreement(loader)
        batches = iter(loader)
        while True:
            at = loader.step  # the step of the next batch
            batch = next(batches, None)
            if batch is None:
                return
            try:
                out = make_global_batch(batch, self.sharding, self.batch_size)
            except BaseException:
                # The loader counts a step read once it hands the batch over; this one
                # never reached the caller (Ctrl-C, a device out of memory), so a state
                # saved now must resume at it, not after it.
                loader.step = at
                raise
            yield out

    @property
    def step(self) -> int:
        """The next global step the consumer has not received (a batch whose global
        arrays failed is not received), as ``HeadraceDataLoader.step``: for a step count
        in logs and checkpoint names."""
        return self.loader.step

    @property
    def stats(self) -> LoaderStats:
        """Where the loader's time went (:class:`~headrace.pipeline.LoaderStats`)."""
        return self.loader.stats

    def __len__(self) -> int:
        """Batches the next iteration yields (the loader's; ``TypeError`` with
        ``steps=None``)."""
        return len(self.loader)

    def __bool__(self) -> bool:
        return True  # not len(): an endless or finished loader is still a loader

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)

    def close(self) -> None:
        self.loader.close()
