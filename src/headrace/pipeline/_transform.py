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
import multiprocessing
import random
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from headrace._warn import warn_user
from headrace.errors import ConfigError
from headrace.pipeline._layout import widened

__all__ = [
    "KEEP_STREAMS",
    "Samples",
    "Transform",
    "apply_transform",
    "check_transform",
    "check_laid",
    "checked_rows",
    "draws_checked",
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
# How many chunks of each transform (by who: "transform X") this process checks for draws from a
# process-wide generator (~0.1-0.2 ms a chunk: the first few are enough to find a habit);
# a transform told once is not checked again.
_CHECKS = 8
_CHECKED: dict[str, int] = {}


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


#: A key's first layout out of a transform: dtype, per-sample shape, and whether each was
#: the source's own (the same key's, as the transform got it).
Laid = tuple[np.dtype[Any], tuple[int, ...], bool, bool]


def apply_transform(
    transform: Transform,
    arrays: dict[str, NDArray[Any]],
    seed: int,
    numbers: NDArray[np.int64],
    laid: dict[str, Laid] | None = None,
) -> dict[str, NDArray[Any]]:
    """``transform(arrays, Samples(seed, numbers))``, checked: one row per sample, as arrays.

    An error it raises gets a note naming it and its samples: its own message (a
    ``ValueError`` of a row it cannot parse) says neither, and a loader without
    read-ahead adds no step. One that draws from a process-wide generator is warned
    (:func:`_global_draws`). ``laid``: each key's first layout out of it, kept by the
    caller across calls (:func:`check_laid`)."""
    name = transform_name(transform)
    try:
        with draws_checked(f"transform {name}", seed, numbers):
            out = transform(arrays, Samples(seed, numbers))
    except StopIteration as exc:
        raise stopped(f"transform {name}", seed, numbers) from exc
    except Exception as exc:
        exc.add_note(f"in transform {name}, {on_samples(seed, numbers)}")
        raise
    rows = checked_rows(
        f"transform {name}",
        out,
        len(numbers),
        "(the loader may pass several steps' rows at once)",
    )
    if laid is not None:
        check_laid(f"transform {name}", laid, arrays, rows, seed, numbers)
    return rows


def check_laid(
    who: str,
    laid: dict[str, Laid],
    given: Mapping[str, NDArray[Any]],
    out: Mapping[str, NDArray[Any]],
    seed: int,
    numbers: NDArray[np.int64],
) -> None:
    """Raise a ConfigError where ``out`` (what ``who`` returned for ``given``) lays a key
    out otherwise than its first call did (``laid``, filled here): a dtype or per-sample
    shape that follows the rows of a call (``np.stack`` of rows of two dtypes, padding to
    the call's longest) follows the loader's chunking, so a step came out float32 in a
    chunk of 32 steps and uint8 with ``chunk_steps=1``, without a word until 2026-12-07.
    Not refused: a key laid out per sample (object rows beside ``<key>_shape``), strings'
    widths (a read's are its values'), and a dtype or shape that is the source's own
    both times (the key as the transform got it: images of several sizes passed through,
    each read's stacked where its samples agree). A few dict look-ups a call."""
    for key, value in out.items():
        dtype, shape = value.dtype, value.shape[1:]
        first = laid.get(key)
        if first is not None and first[0] == dtype and first[1] == shape:
            continue  # as the first call: all a call costs (~0.5 us a key)
        if _ragged(out, key) or (key.endswith("_shape") and _ragged(out, key[:-6])):
            continue
        inner = given.get(key)
        own_dtype = inner is not None and inner.dtype == dtype
        own_shape = inner is not None and inner.shape[1:] == shape
        first = laid.setdefault(key, (dtype, shape, own_dtype, own_shape))
        dtype_ok = widened(first[0], dtype) is not None or (first[2] and own_dtype)
        if dtype_ok and (first[1] == shape or (first[3] and own_shape)):
            continue
        raise ConfigError(
            f"{who} returned {key!r} as {dtype} of per-sample shape {shape} "
            f"{on_samples(seed, numbers)}, where its first call gave {first[0]} of "
            f"per-sample shape {first[1]}: its output follows the rows of the call, and the "
            "loader calls it with several steps' rows at once (chunk_steps), so a step's "
            "batch would change with the chunking, the worker count or a resume. Lay each "
            "row out on its own: cast each row to one dtype (.astype(np.float32)), pad or "
            "crop to a fixed size, never to the call's longest row."
        )


@contextmanager
def draws_checked(who: str, seed: int, numbers: NDArray[np.int64]) -> Iterator[None]:
    """Warn if the ``with`` block (a call of ``who``: a transform, a ``Mapped`` fn, a
    ``Filtered`` keep) drew from a process-wide generator (:func:`_global_draws`): in
    its first :data:`_CHECKS` calls of this process, where no training loop draws
    beside it (:func:`_alone`). A call that raises is not checked."""
    checked = _CHECKED.get(who, 0)
    before = None if checked >= _CHECKS or not _alone() else _global_states()
    yield
    if before is not None:
        _CHECKED[who] = checked + 1
        _global_draws(who, before, seed, numbers)


def _alone() -> bool:
    """Whether no training loop can draw beside this call: it runs on its process's main
    thread (no read-ahead), or in a worker process (a DataLoader's, headrace's). A
    transform on the read-ahead thread of the process that trains is not checked: the
    loop's own draws meanwhile (CPU dropout, from torch's generator) would be taken for
    the transform's."""
    return (
        threading.current_thread() is threading.main_thread()
        or multiprocessing.parent_process() is not None
    )


def _global_states() -> tuple[Any, ...]:
    """The state of each process-wide generator a transform might draw from: NumPy's
    (``np.random.rand``), Python's ``random``, and torch's where torch is imported
    (torchvision's transforms draw from it). 0.1-0.2 ms."""
    np_state = cast(tuple[Any, ...], np.random.get_state())  # legacy: a tuple
    torch = sys.modules.get("torch")
    torch_state = None
    if torch is not None and hasattr(torch, "random"):
        torch_state = bytes(torch.random.get_rng_state().numpy())
    return (np_state[1].tobytes(), *np_state[2:]), random.getstate(), torch_state


def _global_draws(who: str, before: tuple[Any, ...], seed: int, numbers: NDArray[np.int64]) -> None:
    """Warn, once for each ``who`` (``"transform X"``), that it drew from a process-wide
    generator: such draws depend on which process reads a chunk and what it drew
    before, so the same seed gave other bytes on 2 workers than on 0, other bytes in a
    fresh worker every run, and others again when resumed (until 2026-12-07 without a
    word). Not an error: a draw the batches do not depend on (a log's sample) is the
    user's to make, and another thread of this process may have drawn meanwhile."""
    after = _global_states()
    names = (
        "NumPy's global generator (np.random.rand, np.random.randint...)",
        "Python's `random` (random.random...)",
        "torch's global generator (torch.rand, torchvision's transforms...)",
    )
    drawn = [n for n, b, a in zip(names, before, after, strict=True) if b != a]
    if not drawn:
        return
    _CHECKED[who] = _CHECKS
    warn_user(
        f"{who} drew from {' and '.join(drawn)} {on_samples(seed, numbers)}: "
        "those draws depend on which process transforms a chunk and what it drew before, "
        "so its batches will not replay on another worker or host count, chunking or a "
        "resumed run. Draw from each sample's own generator instead (for row, rng in "
        "zip(rows, samples.rngs()): rng.random() ...), keyed by (seed, sample number). "
        "(If another thread of this process drew meanwhile, this warning is that "
        "thread's.)",
        RuntimeWarning,
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


def _ragged(arrays: Mapping[str, NDArray[Any]], key: str) -> bool:
    """Whether ``key`` is laid out per sample: object rows beside ``<key>_shape``."""
    value = arrays.get(key)
    return value is not None and value.dtype == object and f"{key}_shape" in arrays


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
