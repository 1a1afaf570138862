"""A process's rows of each field, assembled into global ``jax.Array`` s: each field made
an array type jax keeps without changing a value, or refused by name."""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import jax
import numpy as np

from headrace._messages import object_field
from headrace.errors import ConfigError, DataError
from headrace.jax._rows import checked_batch_size, checked_sharding, held_rows
from headrace.pipeline import Batch, Loader

__all__ = ["make_global_batch"]


def make_global_batch(batch: Batch, sharding: Any, batch_size: int) -> dict[str, jax.Array]:
    """This process's rows of each array, assembled into global ``jax.Array`` s.

    ``sharding`` lays out every field, or is a dict of one sharding per field (the
    batch's fields exactly). A field of fewer dimensions than its ``PartitionSpec``
    names (a mixture's 1-D ``source`` beside ``(B, L)`` tokens under
    ``P("data", None)``) is laid out by the spec's leading entries: its batch axis as
    the others'. Where this process's rows are several blocks (rows interleaved with
    another process's), ``batch`` holds them joined in row order.
    """
    make: Any = jax.make_array_from_process_local_data  # untyped in some jax releases
    batch_size = checked_batch_size(batch_size)
    if not isinstance(batch, Mapping):
        raise ConfigError(f"batch must be a dict of fields, each an array of {_not_a_batch(batch)}")
    per_field = isinstance(sharding, Mapping)
    if per_field and batch.keys() != sharding.keys():
        unsharded = [f"no sharding for {k!r}" for k in sorted(batch.keys() - sharding.keys())]
        unknown = [f"no field {k!r}" for k in sorted(sharding.keys() - batch.keys())]
        raise ConfigError(
            f"the batch has fields {sorted(batch)} and the sharding dict names "
            f"{sorted(sharding)}: {'; '.join(unsharded + unknown)}; give one sharding per "
            "field (or one sharding for all)."
        )
    if per_field:
        for name in batch:
            checked_sharding(sharding[name], f"sharding[{name!r}]")
    else:
        checked_sharding(sharding)
    out = {}
    for name, value in batch.items():
        _refuse_global(name, value)
        a = _jaxable(name, value)
        if not np.ndim(a):
            raise ConfigError(
                f"field {name!r} is one value (shape ()), not rows: each field of a batch "
                "holds a row for each sample, its first axis the batch's; give it one (e.g. "
                "np.full(rows, value) in the transform), or leave it out of the batch and "
                "pass it to the step on its own"
            )
        shape = (batch_size, *np.shape(a)[1:])
        field_sharding = _for_ndim(sharding[name] if per_field else sharding, len(shape))
        try:
            out[name] = make(field_sharding, a, shape)
        except Exception as exc:
            raise _not_laid_out(name, a, field_sharding, batch_size, exc) from exc
    return out


def _not_a_batch(batch: object) -> str:
    """The rest of the refusal of a ``batch`` that is no dict, saying what to pass where it
    is the loader or its iterator (their private class names said nothing)."""
    if isinstance(batch, Loader):
        what = "a Loader"
    elif hasattr(batch, "state_dict"):  # a JaxLoader, a DataLoader
        what = f"a {type(batch).__name__}"
    elif hasattr(batch, "__next__"):
        what = "an iterator"
    else:
        what = ""
    if what:
        return (
            f"this process's rows (got {what}, of batches): pass one batch at a time, "
            "for batch in loader: make_global_batch(batch, sharding, batch_size)"
        )
    return (
        f"this process's rows (got a {type(batch).__name__}): name them, e.g. "
        "{'x': x, 'y': y} for a pair"
    )


def _refuse_global(name: str, a: Any) -> None:
    """Refuse a global ``jax.Array`` (one spanning processes, as ``JaxLoader`` yields):
    its shape is the global batch's, so it was refused as a wrong row count of this
    process's, or by jax's own gather error, neither naming the mistake."""
    if not isinstance(a, jax.Array) or a.is_fully_addressable:
        return
    devices: Any = a.sharding.device_set  # untyped in some jax releases
    processes = sorted({int(d.process_index) for d in devices})
    raise ConfigError(
        f"field {name!r} is already a global jax.Array (shape {a.shape}, laid out over "
        f"processes {processes} by {a.sharding!r}): make_global_batch takes this process's "
        "own rows (NumPy arrays, as numpy_loader gives them); a JaxLoader's batches are "
        "global already: pass them to the step as they are."
    )


def _jaxable(name: str, a: Any) -> Any:
    """``a`` as jax can take it without changing a value: a list made an array, a dict
    refused; another byte order made this machine's (jax refuses ``>u2`` and ``>f4``); a
    type jax has no array for refused by name; 64-bit integers that jax would keep as
    32-bit ones (``jax_enable_x64`` off) refused where a value does not fit, since jax
    wraps them silently, and 64-bit floats where a finite value would become ``inf`` in
    32 bits."""
    if isinstance(a, Mapping):
        # Else a pytree to jax, past every check here: int64 ids became int32 zeros.
        raise ConfigError(
            f"field {name!r} is a dict (of {sorted(a)!r:.200}), not an array: "
            "make_global_batch lays out one array a field; give each of its arrays a field "
            "of its own"
        )
    if isinstance(a, list | tuple):  # numbers a row (a label list): as NumPy makes them
        try:
            a = np.asarray(a)
        except ValueError:  # rows of several lengths: NumPy's "inhomogeneous shape" names none
            rows = np.empty(len(a), dtype=object)
            for i, row in enumerate(a):  # one a row: refused below, the first of them shown
                rows[i] = row
            a = rows
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
    if a.dtype.kind in "fc" and a.dtype.itemsize > (8 if a.dtype.kind == "f" else 16):
        raise DataError(
            f"field {name!r} has dtype {a.dtype} (NumPy's long double), which jax has no "
            "array type for: cast it to float64 or float32 with a transform"
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
    runs = held_rows(sharding, batch_size)
    held = sum(hi - lo for lo, hi in runs)
    rows = np.shape(a)[0] if np.ndim(a) else 0
    if rows != held:
        shown = ", ".join(f"[{lo}, {hi})" for lo, hi in runs)
        return ConfigError(
            f"field {name!r} has {rows} rows here; this process holds rows {shown} of "
            f"the global batch of {batch_size} under sharding {sharding!r}: expected "
            f"{held} (each process passes its own rows, in row order, as numpy_loader "
            "gives them)."
        )
    what = (
        f"field {name!r} of local shape {np.shape(a)} (global {(batch_size, *np.shape(a)[1:])}) "
        f"cannot be laid out by sharding {sharding!r}"
    )
    uneven = _uneven_split(name, (batch_size, *np.shape(a)[1:]), sharding)
    return ConfigError(f"{what}: {uneven or f'{type(exc).__name__}: {exc}'}")


def _uneven_split(name: str, shape: tuple[int, ...], sharding: Any) -> str | None:
    """Why a non-batch axis (a sequence split for context parallelism) cannot be laid out
    where its ``NamedSharding`` splits it more ways than divide its width, and the ways
    out: jax's error said neither. Refused, not padded: jax keeps no uneven shards
    (``jax.device_put`` refuses them too), and padding here would add tokens the source
    never gave."""
    if not isinstance(sharding, jax.sharding.NamedSharding):
        return None
    spec, sizes = tuple(sharding.spec), dict(sharding.mesh.shape)
    for axis in range(1, min(len(spec), len(shape))):
        names = spec[axis] if isinstance(spec[axis], tuple) else (spec[axis],)
        names = tuple(n for n in names if isinstance(n, str) and n in sizes)
        ways = math.prod(sizes[n] for n in names)
        width = shape[axis]
        if not names or width % ways == 0:
            continue
        shown = ", ".join(repr(e) for e in spec)
        whole = ", ".join("None" if i == axis else repr(e) for i, e in enumerate(spec))
        below = width // ways * ways
        widths = f"{below} or {below + ways}" if below else f"{ways}"
        mesh_axes = f"mesh axis {names[0]!r}" if len(names) == 1 else f"mesh axes {names}"
        return (
            f"its axis {axis} ({width} wide) is split {ways} ways ({mesh_axes} of "
            f"P({shown})), which do not divide {width}, and jax splits an axis in equal "
            "parts only (jax.device_put refuses an uneven split too). Give that axis a "
            f"width {ways} divides ({widths}: a TokenSource or PaddedRows context= for a "
            "sequence, or a transform that pads or crops it), or keep it whole in the "
            f"loader with a sharding per field, {{{name!r}: NamedSharding(mesh, P({whole})), "
            f"...}}, and pad it to a multiple of {ways} in the jitted step before splitting it "
            "there (jax.sharding.reshard, or jax.lax.with_sharding_constraint on a mesh of "
            "Auto axes)."
        )
    return None
