"""Exact passes: where ``epochs`` whole epochs end, and which rows belong to them.

Evaluation must see every held-out sample once, on any number of hosts, with
batches of one shape. ``Loader(..., epochs=k)`` ends at the first step by which
``k`` epochs were planned, and marks every row: ``sample`` (the global sample
number; a mixture's: the sample number within its own source) and ``valid``
(``sample < k * n``). The rows past the pass that fill the last step (the next
epoch's first samples, as without ``epochs``) are real data marked ``False``, so
a metric summed over ``valid`` rows and divided by their count, each reduced over
hosts, is the metric of exactly the pass.

Pure functions of the plan: no I/O, no threads. A mixture's sources advance at
their own pace, so its pass ends at the first step by which every source gave
``k`` epochs of its own; the sources that got there sooner wrap, marked invalid.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError
from headrace.pipeline._layout import Batch
from headrace.pipeline._loader_args import integer

__all__ = [
    "MARKS",
    "check_exact",
    "checked_epochs",
    "epoch_parts",
    "mark",
    "pass_end",
    "pass_sizes",
    "starts_at",
    "with_marks",
]

#: The keys an exact pass adds to every batch.
MARKS = ("sample", "valid")
#: The most samples a plan numbers (int64).
_MAX_SAMPLE = (1 << 63) - 1


def checked_epochs(epochs: object, steps: int | None) -> int | None:
    """``epochs`` as an int >= 1 (or None); refused beside ``steps``, which it sets."""
    if epochs is None:
        return None
    if isinstance(epochs, bool) or not isinstance(epochs, int | np.integer) or epochs < 1:
        raise ConfigError(f"epochs must be None or an integer >= 1 (got epochs={epochs!r}).")
    if steps is not None:
        raise ConfigError(
            f"give epochs or steps, not both (got epochs={epochs}, steps={steps}): "
            "epochs=k ends the loader after the step that completes k epochs."
        )
    return integer("epochs", epochs)


def _epoch_size(source: Any, who: str, what: str) -> int:
    n = getattr(source, "samples_per_epoch", None)
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        instead = " Give it one, or use steps= instead." if what == "epochs=" else ""
        raise ConfigError(
            f"{what} needs a source that says how many samples an epoch holds, as "
            f"every headrace source does; {who} has no samples_per_epoch >= 1 (got "
            f"{n!r}).{instead}"
        )
    return int(n)


def _parts(source: Any) -> list[tuple[Any, str]]:
    """The sources whose epochs a pass counts, each with how an error names it."""
    if not _mixed(source):
        return [(source, type(source).__name__)]
    subs = source.sources
    names = getattr(source, "names", [str(i) for i in range(len(subs))])
    return [
        (s, f"source {name!r} ({type(s).__name__}) of the mixture")
        for name, s in zip(names, subs, strict=True)
    ]


def _mixed(source: Any) -> bool:
    """Whether ``source`` mixes sources (a :class:`~headrace.pipeline.Mixture`): its
    samples are numbered within each of its sources."""
    return hasattr(source, "plan") and getattr(source, "sources", None) is not None


def epoch_parts(source: Any, what: str = "epochs=") -> list[tuple[Any, str, int]]:
    """Each source whose epoch a pass reads (a mixture's, or ``source``), how an error
    names it, and its samples an epoch (``what``: what needs them, for the refusal)."""
    return [(s, who, _epoch_size(s, who, what)) for s, who in _parts(source)]


def pass_sizes(source: Any, epochs: int) -> NDArray[np.int64]:
    """Samples of the pass: ``epochs`` epochs of the source (of each source of a mixture,
    in its order), once the source is known to give each of them as itself."""
    check_exact(source, f"epochs={epochs}")
    parts = epoch_parts(source)
    # In Python ints: NumPy's int64 product wraps, and a pass of epochs=2**60 ended at a
    # negative step (no batch) or at some small one.
    _, who, most = max(parts, key=lambda p: p[2])
    if epochs * most > _MAX_SAMPLE:
        raise ConfigError(
            f"epochs={epochs} of {who} ({most:,} samples an epoch) is {epochs * most:,} "
            f"samples, past the {_MAX_SAMPLE:,} (2**63 - 1) a plan numbers; give at most "
            f"epochs={_MAX_SAMPLE // most}"
        )
    return np.array([n * epochs for _, _, n in parts], dtype=np.int64)


def check_exact(source: Any, what: str) -> None:
    """Refuse a source that would give some sample of the pass in another's place (rows
    without a target replaced, files that do not decode replaced): it would be counted
    twice, and the sample it replaced never. ``what`` starts the refusal."""
    for s, who in _parts(source):
        reason = getattr(s, "replaces", None)
        if reason is not None:
            where = "" if s is source else f" ({who})"
            raise ConfigError(f"{what}: {reason}{where}.")


def pass_end(source: Any, batch_size: int, want: NDArray[np.int64]) -> int:
    """The step by which ``want`` samples (:func:`pass_sizes`) of ``source`` (of every
    source of a mixture) have all been planned: the loader's ``steps``."""
    if not _mixed(source):
        return -(-int(want[0]) // batch_size)
    first = first_steps(source, want, "epochs=")
    if (first < 0).any():
        name = source.names[int(np.flatnonzero(first < 0)[0])]
        # Without a schedule, "the last phase of the schedule" named a schedule not given.
        why = "weight 0 in the last phase of the schedule" if source.plan.schedule else "weight 0"
        raise ConfigError(
            f"epochs=: source {name!r} of the mixture never completes its epochs ({why}); "
            "an exact pass reads every source, so give it a weight > 0, or leave it out "
            "of the mixture."
        )
    return int(first.max())


def first_steps(mixture: Any, want: NDArray[np.int64], what: str) -> NDArray[np.int64]:
    """The mixture plan's :meth:`~headrace.plan.MixturePlan.first_steps` of ``want``, each
    source's fewest steps to give its count; ``-1`` only where its weight is 0 from some
    phase on. A count its weight would reach only past the sample numbers is refused
    (``what``: what asked), not told as a weight of 0."""
    plan = mixture.plan
    first: NDArray[np.int64] = plan.first_steps(want)
    last = plan.schedule[-1][1] if plan.schedule else plan.numerators
    far = [s for s in np.flatnonzero(first < 0).tolist() if last[s]]
    if far:
        s = far[0]
        raise ConfigError(
            f"{what}: source {mixture.names[s]!r} of the mixture would give its "
            f"{int(want[s]):,} samples only past sample 2**63 - 1, the last a plan numbers "
            f"(at {plan.weights[s]:.3g} of each batch of {plan.batch_size}); ask for fewer "
            "epochs"
        )
    return first


def starts_at(step: int, steps: int | None, epochs: int | None, moved: bool = False) -> int:
    """Where the next iteration starts: ``step``, or 0 for an exact pass that is over or
    that an iteration here left part way (``moved``: no state loaded since). Each
    evaluation of ``for batch in val_loader`` is the whole pass, as a DataLoader's is:
    one broken off (Lightning's 2-batch sanity check, ``limit_val_batches``, an
    exception) made the next go on from its step, leaving out the samples before it
    without a word. A state loaded (a pass interrupted and resumed) goes on from its step."""
    if epochs is not None and steps is not None and (moved or step >= steps):
        return 0
    return step


def mark(source: Any, seed: int, samples: NDArray[np.int64], want: NDArray[np.int64]) -> Batch:
    """``sample`` and ``valid`` of each of ``samples`` (global sample numbers), for a pass
    of ``want`` samples (:func:`pass_sizes`)."""
    if not _mixed(source):
        # Not by len(want): a mixture of one source still deals each step's positions
        # by a permutation, so its sample at a position is not the global number there.
        number = samples.astype(np.int64, copy=True)
        return {"sample": number, "valid": number < want[0]}
    # The mixture keeps its last answer: the samples it has just read (measured: 3.8 us
    # a chunk of 1,024 samples, where planning them again took 372 us, +25% a batch).
    which, local = source.locate(seed, samples)
    return {"sample": local, "valid": local < want[which]}


def with_marks(arrays: Batch, marks: Batch, epochs: int | None, made: str) -> Batch:
    """``arrays`` with an exact pass's ``sample`` and ``valid`` beside them; refused where
    ``made`` (the source, and its transform) already gives one of those keys."""
    taken = [k for k in MARKS if k in arrays]
    if taken:
        raise ConfigError(
            f"epochs={epochs} adds the keys {MARKS} to every batch, but "
            f"{made} already gives {taken[0]!r}; rename that field (a transform or "
            "Mapped(source, fn)), or iterate with steps= and no marks."
        )
    return {**arrays, **marks}
