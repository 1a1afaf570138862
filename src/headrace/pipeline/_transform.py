"""Per-sample transforms (augmentation) that stay deterministic and resumable.

``Loader(source, ..., transform=fn)`` calls ``fn(arrays, samples)`` on what
the source read, before batches are handed out: ``arrays`` is a dict of
arrays whose first axis is one row per sample, and ``samples`` a
:class:`Samples` naming each row's global sample number, with a random
generator per row keyed by ``(seed, sample number)``. A sample is therefore
transformed the same way whichever host, worker, chunk or resumed run reads
it. The loader may call ``fn`` with one step's rows or several steps' rows at
once (its chunks): ``fn`` must treat rows independently, and return one row
per sample, in the same order.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError

__all__ = [
    "KEEP_STREAMS",
    "Samples",
    "Transform",
    "apply_transform",
    "check_transform",
    "checked_rows",
    "on_samples",
    "stopped",
    "transform_name",
]

# Mixed into every generator's seed, so a transform's random stream is not the
# stream of any other use of (seed, sample) a user's code might make.
_TAG = 0x7472616E73666F72  # "transfor"
# A Filtered source's keep draws from streams KEEP_STREAMS + k (k: the Filtered layers
# below it), apart from the loader's transform (0) and Mapped ones (1 and up): on the
# loader's stream, a keep that kept a random half decided every kept sample's flip
# (each draw was the keep's own, below 0.5) and every replaced place's.
KEEP_STREAMS = 1 << 32
# How many of a failing transform's sample numbers its error's note shows.
_SHOWN = 5


class Samples:
    """The rows a transform gets: their global sample numbers and random generators.

    ``stream`` tells apart transforms stacked on one sample (a
    :class:`~headrace.pipeline.Mapped` source's, 1 and up, under the loader's, 0, and a
    :class:`~headrace.pipeline.Filtered` source's ``keep``, ``KEEP_STREAMS`` and up), so
    that a crop's offsets and a flip's coin are not drawn from the same bits.
    """

    __slots__ = ("_key", "numbers", "seed")

    def __init__(self, seed: int, numbers: NDArray[np.int64], stream: int = 0) -> None:
        self.seed = seed
        self.numbers = numbers
        # Stream 0 keeps the key the loader's transform always had (its golden digests).
        self._key = (_TAG,) if stream == 0 else (_TAG, stream)

    def __len__(self) -> int:
        return len(self.numbers)

    def rng(self, i: int) -> np.random.Generator:
        """Row ``i``'s generator: PCG64 seeded by ``(seed, sample number)``, fresh each call."""
        return np.random.default_rng([self.seed, int(self.numbers[i]), *self._key])

    def rngs(self) -> Iterator[np.random.Generator]:
        """Every row's generator, in row order (~11 us each)."""
        key = self._key
        for n in self.numbers.tolist():
            yield np.random.default_rng([self.seed, n, *key])

    def __repr__(self) -> str:
        return f"Samples(seed={self.seed}, numbers={self.numbers!r})"


Transform = Callable[[dict[str, NDArray[Any]], Samples], Mapping[str, NDArray[Any]]]


def apply_transform(
    transform: Transform, arrays: dict[str, NDArray[Any]], seed: int, numbers: NDArray[np.int64]
) -> dict[str, NDArray[Any]]:
    """``transform(arrays, Samples(seed, numbers))``, checked: one row per sample, as arrays.

    An error it raises gets a note naming it and its samples: its own message (a
    ``ValueError`` of a row it cannot parse) says neither, and a loader without
    read-ahead adds no step."""
    try:
        out = transform(arrays, Samples(seed, numbers))
    except StopIteration as exc:
        raise stopped(f"transform {transform_name(transform)}", seed, numbers) from exc
    except Exception as exc:
        exc.add_note(f"in transform {transform_name(transform)}, {on_samples(seed, numbers)}")
        raise
    return checked_rows(
        f"transform {transform_name(transform)}",
        out,
        len(numbers),
        "(the loader may pass several steps' rows at once)",
    )


def checked_rows(who: str, out: object, n: int, hint: str = "") -> dict[str, NDArray[Any]]:
    """``out`` (what a source or a transform returned) as a dict of arrays, or a
    ConfigError naming ``who`` and the key: one row per sample is what a loader splits
    by steps (a row short would shift every later batch of its chunk)."""
    if not isinstance(out, Mapping):
        raise ConfigError(
            f"{who} returned {type(out).__name__}; it must return a dict of NumPy arrays "
            f"with one row per sample {hint}".rstrip()
        )
    checked = {}
    for key, value in out.items():
        if not isinstance(value, np.ndarray):  # ("with shape dict" until 2026-12-07)
            what = type(value).__name__
            an = "an" if what[:1].lower() in "aeiou" else "a"
            raise ConfigError(
                f"{who} returned {key!r} as {an} {what}, not an array, for {n} samples; every "
                f"value must be a NumPy array with one row per sample {hint}".rstrip()
            )
        if value.ndim == 0 or len(value) != n:
            shape = value.shape
            raise ConfigError(
                f"{who} returned {key!r} with shape {shape} for {n} samples; every value "
                f"must be a NumPy array with one row per sample {hint}".rstrip()
            )
        checked[str(key)] = value
    return checked


def stopped(who: str, seed: int, numbers: NDArray[np.int64]) -> RuntimeError:
    """The error for a StopIteration out of ``who`` (a transform, a ``Mapped`` fn): out of
    the loader's generator it was Python's bare "generator raised StopIteration", naming
    neither ``who`` nor its samples (the loader's step note is added to it)."""
    return RuntimeError(
        f"{who} raised StopIteration {on_samples(seed, numbers)} (a next() on an exhausted "
        "iterator?); it cannot end the loader's iteration: return the rows, or raise "
        "another error"
    )


def on_samples(seed: int, numbers: NDArray[np.int64]) -> str:
    """``"on 8 sample(s) of seed 5: 32, 33, 34, 35, 36, ..."``: which rows a transform
    had, to read them again (``source.read(seed, numbers)``); a loader may have passed
    several steps' rows, and reads a failed chunk again a step at a time."""
    if not len(numbers):
        return f"on no samples (seed {seed})"
    shown = ", ".join(str(n) for n in numbers[:_SHOWN].tolist())
    more = ", ..." if len(numbers) > _SHOWN else ""
    return f"on {len(numbers)} sample(s) of seed {seed}: {shown}{more}"


def check_transform(who: str, fn: object) -> None:
    """Refuse ``fn`` (``who``: ``"transform"``, ``"Mapped: fn"``) unless it is callable
    as ``fn(arrays, samples)``: a one-argument transform (torchvision's habit) failed
    only at the first batch, in the read-ahead thread, with Python's own TypeError."""
    if not callable(fn):
        raise ConfigError(f"{who} must be callable (got {type(fn).__name__}).")
    if isinstance(fn, type) and not issubclass(fn, Mapping):
        # transform=CenterCrop binds as (size, resize): taken, it failed at the first
        # batch with "size must be (height, width) (got {'image': array(...".
        raise ConfigError(
            f"{who} is the class {fn.__name__}, not a transform made from it; give one "
            f"made with its settings ({fn.__name__}(...))."
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without one: called as it is
        return
    try:
        signature.bind(None, None)
    except TypeError:
        raise ConfigError(
            f"{who} {transform_name(fn)}({', '.join(signature.parameters)}) cannot be called "
            "as fn(arrays, samples): "
            "it gets a dict of arrays of one row per sample and their Samples (sample "
            "numbers and random generators) and returns a dict of arrays; give it both "
            "parameters (def fn(arrays, samples): ...)."
        ) from None


def transform_name(fn: object) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__
