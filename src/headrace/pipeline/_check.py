"""Read every sample of a dataset once, before a run, and list every one that fails.

A run that meets a corrupt file or a token id past the vocabulary stops there, at
hour 30, naming that one sample. :func:`check` reads the whole epoch ahead of time
through a :class:`~headrace.pipeline.Loader` (deep read-ahead, the source's own
I/O), and where a step fails it finds the failing samples by halving the step's
samples and reading the halves again (about ``2 log2(batch)`` small reads a bad
sample), records each with its error, and goes on from the next step: one pass
lists them all. The bytes and the errors are those a training run would meet: the
same source reads them.

Samples whose arrays differ in shape or dtype are not a failure (a batch of them is
ragged: an ``object`` array and ``<key>_shape``), but one odd file among thousands is
what a run does not expect: the report counts each key's shapes and names the first
sample (and file) of each where there are several.

A source that puts other samples in place of bad ones (``on_corrupt="replace"``,
``empty_rows="replace"``) is refused, as an exact pass refuses it: the check would
not see what it replaced. A mixture is checked source by source.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import CodecUnavailableError, ConfigError, HeadraceError
from headrace.pipeline._loader import Loader
from headrace.pipeline._loader_args import integer
from headrace.pipeline._passes import check_exact, epoch_parts
from headrace.plan import WindowLayout

__all__ = ["CheckReport", "Problem", "check"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One sample that could not be read: which source (its name in a mixture, else its
    type), its sample number, the error's type and its message.

    A token source's ``sample`` is its number in file order (file 0's samples first, as
    ``shuffle=False`` reads them; the message names the file and token offset), a file
    source's likewise (as ``shuffle="none"`` reads them, a batch's ``index``), a table's
    (and MDS shards') its row in the dataset: the check's own order is a seed's shuffle,
    which names no place in the files."""

    source: str
    sample: int
    error: str
    message: str

    def __str__(self) -> str:
        return f"{self.source} sample {self.sample}: {self.error}: {self.message}"


@dataclass(slots=True)
class CheckReport:
    """What :func:`check` read and what failed.

    ``samples``: samples read (each source's epoch, or its shard's, summed; up to the
    step of the last problem listed when stopped); ``shapes``: each key's shapes and
    dtypes, counted over every sample read (a failed step's good samples too: its halves
    were read again); ``problems``: one per failing
    sample, in sample order per source (those of one message, a broken file's, are one
    problem as ``most`` counts them: a line of :attr:`grouped`); ``complete``: every
    sample was read and every problem listed: ``False`` when the check stopped at ``most``
    problems with samples left unread (or found more in its last step), or was interrupted;
    ``interrupted``: it was (Ctrl-C, SIGTERM: see :func:`check`); ``seconds``: its
    wall time.
    """

    samples: int = 0
    problems: list[Problem] = field(default_factory=list)
    complete: bool = True
    seconds: float = 0.0
    interrupted: bool = False
    shapes: dict[str, dict[str, list[Any]]] = field(default_factory=dict)

    @property
    def varied(self) -> list[str]:
        """A line for each key whose samples came in several shapes or dtypes: up to
        :data:`NAMED_SHAPES` shapes each with its count and its first sample (and file,
        where the source has files); more (JPEGs of varied sizes, records of varied
        lengths: a shape a sample) summed up as each dimension's span and median, the
        most common, the smallest and the largest, and how many more ``shapes`` holds.
        Naming each made one line of 541 KB of 10,000 TFRecords' JPEG lengths."""
        ragged = "a batch holding two is ragged (an object array and its _shape)"
        out = []
        for key, seen in self.shapes.items():
            if len(seen) <= 1:
                continue
            if len(seen) <= NAMED_SHAPES:
                named = ", ".join(_named(kind, seen) for kind in seen)
                out.append(f"{key!r} has {len(seen)} shapes: {named}; {ragged}")
            else:
                out.append(f"{key!r} has {len(seen):,} shapes, {_summary(seen)}; {ragged}")
        return out

    @property
    def ok(self) -> bool:
        """Every sample was read, and none failed."""
        return self.complete and not self.problems

    def __str__(self) -> str:
        noun = "sample" if self.samples == 1 else "samples"
        head = f"{self.samples:,} {noun} read in {self.seconds:.1f} s: "
        notes = [f"  note: {line}" for line in self.varied]
        if self.ok and not self.samples:  # a shard past the samples: no pass
            return head + "nothing checked (no sample in this shard's steps)"
        if self.ok:
            return "\n".join([head + "no problems", *notes])
        n = len(self.problems)
        if self.interrupted:
            head += f"{n:,} failed before it was interrupted"
        else:
            most = len(self.grouped)  # problems as most counts them
            head += f"{n:,} failed" + (
                "" if self.complete else f" (stopped at {most:,}: most={most})"
            )
        return "\n".join([head, *(f"  {line}" for line in self.grouped), *notes])

    @property
    def grouped(self) -> list[str]:
        """The problems a line each, but those of one message (the samples of one broken
        file, an object that answers 403) one line together, naming their samples (the
        first :data:`NAMED_RUNS` runs of them) and their count: a truncated shard of
        1,000 samples printed the same message ``most`` times, and nothing else."""
        same: dict[tuple[str, str, str], list[int]] = {}
        for p in self.problems:
            same.setdefault((p.source, p.error, p.message), []).append(p.sample)
        return [
            str(Problem(source, numbers[0], error, message))
            if len(numbers) == 1
            else f"{source} samples {_runs(numbers)} ({len(numbers):,}): {error}: {message}"
            for (source, error, message), numbers in same.items()
        ]


def check(
    source: Any,
    *,
    batch_size: int = 64,
    seed: int = 0,
    most: int = 100,
    prefetch: int = 8,
    shard: tuple[int, int] = (0, 1),
    progress: Callable[[int, int], None] | None = None,
) -> CheckReport:
    """Read each sample of one epoch of ``source`` (of each source of a mixture) once
    and list every sample whose read fails, with its error.

    ``batch_size``: samples a read (the Loader's step); ``seed``: any seed reads every
    sample once (the order differs); ``most``: stop after this many problems (a
    dataset where everything fails is found out at once), the samples of one message
    one problem (a truncated file of 10,000 samples, a file deleted, an object that
    answers 403: each sample of it is listed; counted each, one dead shard stopped the
    check before the rest of the dataset was read); ``shard=(i, k)``: check
    only steps ``i, i + k, ...``, so ``k`` machines (or processes) check a large
    dataset together, each its own share (their problems together are the whole
    check's; an epoch of fewer than ``k`` steps is read in smaller steps, one a shard
    while there are ``k`` samples); ``progress(done, total)``: called after each step,
    in samples of this shard. Errors that are not about the data or the storage (a
    ``ConfigError``, a bug) are raised, not listed (a row longer than its width, a
    ``ConfigError`` that names its ``sample``, is listed), nor is a
    :class:`~headrace.errors.CodecUnavailableError` (an HDF5 filter plugin this process
    has not loaded: every file it compresses would be listed as failed), nor a
    ``samples_per_file`` that the files read contradict alike (two or more, each with the
    same count on the leading axis, no sample read yet: a ``ConfigError`` naming their
    count; a file of another count among files read well is listed). Interrupted
    (``KeyboardInterrupt``, or the ``SystemExit`` a SIGTERM handler raises), it raises
    that with what it found so far as the exception's ``report`` (``interrupted=True``):
    an hour's findings are not lost to a Ctrl-C.
    """
    batch_size = integer("batch_size", batch_size)
    most = integer("most", most)
    if batch_size < 1 or most < 1:
        raise ConfigError(f"check needs batch_size >= 1 and most >= 1 (got {batch_size}, {most}).")
    i, k = _shard(shard)
    check_exact(source, "check")
    parts = epoch_parts(source, "check")
    report = CheckReport()
    total = sum(_shard_samples(n, _shard_batch(n, batch_size, k), i, k) for _, _, n in parts)
    t0 = time.perf_counter()
    try:
        _check_parts(parts, report, total, batch_size, seed, most, prefetch, i, k, progress)
    except (KeyboardInterrupt, SystemExit) as exc:
        report.complete, report.interrupted = False, True
        report.seconds = time.perf_counter() - t0
        setattr(exc, "report", report)  # noqa: B010 (an attribute exceptions do not declare)
        raise
    report.seconds = time.perf_counter() - t0
    return report


def _check_parts(
    parts: list[tuple[Any, str, int]],
    report: CheckReport,
    total: int,
    batch_size: int,
    seed: int,
    most: int,
    prefetch: int,
    i: int,
    k: int,
    progress: Callable[[int, int], None] | None,
) -> None:
    """:func:`check`'s reads, into ``report``."""
    size = batch_size
    kinds: set[tuple[str, str, str]] = set()  # the problems, as most counts them
    stopped = False

    def step_done(t: int, n: int) -> int:
        rows = min(batch_size, n - t * batch_size)
        report.samples += rows
        if progress is not None:
            progress(report.samples, total)
        return rows

    for j, (part, name, n) in enumerate(parts):
        batch_size = _shard_batch(n, size, k)
        steps = -(-n // batch_size)
        first = len(report.problems)
        # Files whose leading axis contradicted samples_per_file alike, while no sample of
        # this part was read well; None once that is not so (a setting it cannot be).
        alike: dict[str, tuple[int | None, int]] | None = {}
        with Loader(
            part,
            batch_size=batch_size,
            seed=seed,
            world_size=1,  # every sample, also in a process of a multi-rank launch
            steps=steps,
            prefetch=prefetch,
            step_stride=k,
            step_offset=i,
        ) as ld:
            while ld.step + (i - ld.step) % k < steps:
                try:
                    for batch in ld:
                        alike = None  # a step read well: files of another count are damage
                        t = ld.step - 1
                        rows = step_done(t, n)
                        numbers = _file_order(part, seed, t * batch_size + np.arange(rows))
                        _tally_shapes(part, name, batch, rows, numbers, report.shapes)
                except HeadraceError as exc:
                    if _setting(exc):
                        raise
                    # The failing step: this shard's next after those that arrived.
                    t = ld.step + (i - ld.step) % k
                    samples = np.arange(t * batch_size, min(n, (t + 1) * batch_size))
                    before = len(report.problems)
                    errors: list[HeadraceError] = []
                    good = _bisect(part, name, seed, samples, report.problems, errors)
                    alike = None if good else _count_setting(part, errors, alike)
                    for read, batch in good:  # the halves read whole: their shapes count
                        numbers = _file_order(part, seed, read)
                        _tally_shapes(part, name, batch, len(read), numbers, report.shapes)
                    step_done(t, n)
                    dropped = _keep_most(report.problems, before, kinds, most)
                    if len(kinds) >= most:
                        # Nothing left unread (this was the last step) and nothing dropped:
                        # complete, though the last problem landed on most.
                        rest = [
                            _shard_samples(m, _shard_batch(m, size, k), i, k) for *_, m in parts
                        ]
                        left = t + k < steps or any(rest[j + 1 :])
                        report.complete = not (dropped or left)
                        stopped = True
                        break
                    ld.load_state_dict({**ld.state_dict(), "step": t + 1})
        # In sample order (a token source's file order is not the order it read them in).
        report.problems[first:] = sorted(report.problems[first:], key=lambda p: p.sample)
        if stopped:
            break


def _keep_most(
    problems: list[Problem], start: int, kinds: set[tuple[str, str, str]], most: int
) -> bool:
    """Keep those of ``problems[start:]`` (a step's) whose message is one of the first
    ``most`` (``kinds``: those met before, added to); returns whether any was dropped."""
    kept = []
    for p in problems[start:]:
        kind = (p.source, p.error, p.message)
        if kind not in kinds and len(kinds) >= most:
            continue
        kinds.add(kind)
        kept.append(p)
    dropped = len(kept) < len(problems) - start
    problems[start:] = kept
    return dropped


#: Runs of sample numbers a line of problems of one message names (:func:`_runs`).
NAMED_RUNS = 5


def _runs(numbers: list[int]) -> str:
    """``3-5, 9, 11 and 2 more``: sorted sample numbers as runs of consecutive ones, the
    first :data:`NAMED_RUNS` of them."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    shown = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:NAMED_RUNS])
    rest = sum(b - a + 1 for a, b in runs[NAMED_RUNS:])
    return shown + (f" and {rest:,} more" if rest else "")


#: Shapes a key's note names one by one; past these it sums them up (:func:`_summary`).
NAMED_SHAPES = 4
#: The most common shapes a summed-up note names (those of more than one sample).
_COMMON = 3


def _named(kind: str, seen: dict[str, list[Any]]) -> str:
    n, first = seen[kind]
    return f"{kind} in {n:,} (first: {first})"


def _summary(seen: dict[str, list[Any]]) -> str:
    """Many shapes of one key in a few words: the span (and median, over the samples) of
    each dimension, the dtypes, the most common shapes, the smallest and the largest
    (each with its count and first sample), and how many more ``report.shapes`` holds."""
    kinds = list(seen)
    parsed = [kind.rpartition(" ") for kind in kinds]
    dims = [tuple(int(d) for d in s.strip("()").split(",") if d.strip()) for s, _, _ in parsed]
    counts = np.array([seen[k][0] for k in kinds], dtype=np.int64)
    dtypes = " or ".join(dict.fromkeys(dt for _, _, dt in parsed))
    if len({len(d) for d in dims}) == 1 and dims[0]:
        spans, medians = [], []
        for column in np.array(dims, dtype=np.int64).T:
            lo, hi = int(column.min()), int(column.max())
            spans.append(f"{lo}" if lo == hi else f"{lo}-{hi}")
            order = np.argsort(column, kind="stable")
            half = np.searchsorted(np.cumsum(counts[order]), (counts.sum() + 1) // 2)
            medians.append(str(int(column[order[half]])))
        span = f"sizes {' x '.join(spans)} (median {' x '.join(medians)}) {dtypes}"
    else:
        ranks = sorted({len(d) for d in dims})
        span = f"{ranks[0]} to {ranks[-1]} dimensions, {dtypes}"
    common = [kinds[j] for j in np.argsort(-counts, kind="stable")[:_COMMON] if counts[j] > 1]
    sizes = [int(np.prod(d)) for d in dims]
    small, large = kinds[int(np.argmin(sizes))], kinds[int(np.argmax(sizes))]
    parts = [f"most common {', '.join(_named(k, seen) for k in common)}"] if common else []
    parts += [f"smallest {_named(small, seen)}", f"largest {_named(large, seen)}"]
    more = len(kinds) - len({*common, small, large})
    return (
        f"{span}: {'; '.join(parts)}; and {more:,} more (each in report.shapes, "
        '"shapes" in the --json report)'
    )


_PLAN_KEYS = frozenset({"index", "sample", "valid", "source"})


def _tally_shapes(
    source: Any,
    name: str,
    batch: Any,
    rows: int,
    numbers: NDArray[np.int64],
    shapes: dict[str, dict[str, list[Any]]],
) -> None:
    """Count the shape and dtype of each of the batch's first ``rows`` samples, per key
    (``name: key`` where ``source`` is one of a mixture's); ``numbers``: each row's
    sample number, as a :class:`Problem` names it."""
    if not isinstance(batch, dict):
        return
    files = getattr(source, "files", None)
    for key, value in batch.items():
        ragged = batch.get(f"{key}_shape")
        shape_of = key.endswith("_shape") and key[:-6] in batch
        if key in _PLAN_KEYS or not isinstance(value, np.ndarray) or shape_of:
            continue  # the plan's keys, and a ragged key's shapes (read with it)
        here: dict[str, list[int]] = {}  # kind: [samples, the first one's row]
        if value.dtype == object and isinstance(ragged, np.ndarray):
            for j, v in enumerate(value[:rows]):
                kind = _kind(np.asarray(v).shape, np.asarray(v).dtype)
                here.setdefault(kind, [0, j])[0] += 1
        elif rows > 0:  # stacked: one kind, counted at once
            here[_kind(value.shape[1:], value.dtype)] = [rows, 0]
        label = key if name == type(source).__name__ else f"{name}: {key}"
        seen = shapes.setdefault(label, {})
        for kind, (n, j) in here.items():
            if kind in seen:
                seen[kind][0] += n
                continue
            where = f"sample {int(numbers[j])}"
            if files is not None and "index" in batch:
                f, _ = source.file_item(batch["index"][j : j + 1])
                where += f", {files.keys[int(f[0])]}"
            seen[kind] = [n, where]


def _kind(shape: tuple[int, ...], dtype: np.dtype[Any]) -> str:
    return f"{tuple(int(d) for d in shape)} {dtype}"


def _shard(shard: object) -> tuple[int, int]:
    """``shard`` as ``(i, k)`` with ``0 <= i < k``, or refused."""
    if isinstance(shard, tuple) and len(shard) == 2:
        i, k = shard
        whole = all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in shard)
        if whole and 0 <= i < k:
            return int(i), int(k)
    raise ConfigError(f"check's shard must be (i, k) with 0 <= i < k (got {shard!r}).")


def _shard_batch(n: int, batch_size: int, k: int) -> int:
    """The step of a check of ``n`` samples in ``k`` shards: ``batch_size``, or smaller
    where the epoch has fewer than ``k`` steps of it, so that each shard gets a step
    (while there are ``k`` samples). 20 samples at 64 a step were one step: shard 1/2
    checked nothing and said "no problems". The same for every shard: together they
    still read each sample once."""
    if k == 1 or -(-n // batch_size) >= k:
        return batch_size
    return max(1, n // k)


def _shard_samples(n: int, batch_size: int, i: int, k: int) -> int:
    """Samples of steps ``i, i + k, ...`` of an epoch of ``n`` in steps of ``batch_size``
    (every step is whole but the last)."""
    steps = -(-n // batch_size)
    own = max(0, -(-(steps - i) // k))
    short = steps * batch_size - n if own and (steps - 1 - i) % k == 0 else 0
    return own * batch_size - short


def _bisect(
    source: Any,
    name: str,
    seed: int,
    samples: NDArray[np.int64],
    out: list[Problem],
    errors: list[HeadraceError],
) -> list[tuple[NDArray[np.int64], Any]]:
    """Append a :class:`Problem` for each of ``samples`` whose read fails (and its error
    to ``errors``): the halves of a failing read are read again, down to single samples.
    Returns the reads that succeeded, ``(samples, batch)`` each, for their shapes."""
    try:
        return [(samples, source.read(seed, samples))]
    except HeadraceError as exc:
        if _setting(exc):
            raise
        if len(samples) == 1:
            number = int(_file_order(source, seed, samples)[0])
            # A token source's or a table's message names the sample as the read asked it,
            # the seed's shuffled number ("sample 26: ... (sample 41)", "row 5 (row 305 of
            # the table, sample 197)"): named as the Problem is.
            # A message of the file, not the record, where the error has one (a TFRecord
            # feature of another kind of list): a shard's records then are one line.
            said = getattr(exc, "per_file", None) or str(exc)
            for lead in (" (", ", "):
                if f"{lead}sample {int(samples[0])})" in said:
                    was, now = f"{lead}sample {int(samples[0])})", f"{lead}sample {number})"
                    said = said.replace(was, now, 1)
                    break
            out.append(Problem(name, number, type(exc).__name__, said))
            errors.append(exc)
            return []
    half = len(samples) // 2
    return [
        *_bisect(source, name, seed, samples[:half], out, errors),
        *_bisect(source, name, seed, samples[half:], out, errors),
    ]


def _count_setting(
    source: Any,
    errors: list[HeadraceError],
    alike: dict[str, tuple[int | None, int]] | None,
) -> dict[str, tuple[int | None, int]] | None:
    """Add a failed step's files to ``alike`` (and return it) where each error refuses a
    file's leading axis against a fixed ``samples_per_file``, the same length as the
    others'; ``None`` where one does not. Raise a ``ConfigError`` once two files (or the
    only one) did so: files of 256 checked with ``--samples-per-file 300`` listed every
    sample of every file as a problem, bisected down to single samples, one file a line."""
    if alike is None:
        return None
    for exc in errors:
        leading = getattr(exc, "leading", None)  # (file, found, samples_per_file)
        if leading is None or any(seen != leading[1:] for seen in alike.values()):
            return None
        alike[leading[0]] = leading[1:]
    files = getattr(getattr(source, "plan", None), "num_files", 2)
    if not alike or len(alike) < min(2, files):
        return alike
    (found, spf), named = next(iter(alike.values())), list(alike)
    held = "" if found is None else f" hold {found:,} samples on the leading axis"
    fix = "" if found is None else f"samples_per_file={found} or "
    raise ConfigError(
        f"samples_per_file={spf}, but the files{held or ' do not hold that many'} "
        f"({', '.join(named[:2])}{f' and {len(named) - 2:,} more' if named[2:] else ''}), "
        f"and no sample was read: give {fix}samples_per_file='header' (each file's count "
        "read from its header)"
    ) from errors[0]


def _setting(exc: HeadraceError) -> bool:
    """A refusal that stops the check (a setting), not a sample's problem: a
    ``ConfigError``, unless it names the one ``sample`` it is about (a table's row longer
    than its width, a setting that row alone fails): each of those is listed; and a
    ``CodecUnavailableError``, this process's lack, not a file's damage."""
    if isinstance(exc, CodecUnavailableError):
        return True
    return isinstance(exc, ConfigError) and not hasattr(exc, "sample")


def _file_order(source: Any, seed: int, samples: NDArray[np.int64]) -> NDArray[np.int64]:
    """A token source's ``samples`` (of an epoch read with ``seed``) numbered in file
    order: the starts of the files before, then the start's place in its file (a tail or
    stride start slid back to its file's end is the one after the grid start before it).
    A file source's in dataset order (its batches' ``index``: file 0's samples first):
    shuffled, a truncated ``s3.npy`` of 10 samples was "samples 20-29". A source of rows
    (a table, MDS shards, padded rows: ``starts`` gives file 0 and the row) by its row in
    dataset order: a table's row 123 was "sample 5024". Other sources' samples as they
    are."""
    layout = getattr(source, "layout", None)
    by_file: Any = getattr(source, "plan", None)  # a FileSource's FilePlan
    if not len(samples):
        return samples
    if not isinstance(layout, WindowLayout):
        if all(callable(getattr(by_file, f, None)) for f in ("locate", "index", "file_item")):
            files, items = by_file.locate(seed, samples)
            index: NDArray[np.int64] = np.asarray(by_file.index(files, items), dtype=np.int64)
            return index
        if callable(getattr(source, "starts", None)):
            _, rows = source.starts(seed, samples)
            return np.asarray(rows, dtype=np.int64)
        return samples
    plan = layout.locate(seed, samples)
    files = layout.window_file[plan.window]
    offsets = layout.window_base[plan.window] + plan.start
    before = np.concatenate(([0], np.cumsum(layout.file_starts)))[files]
    order: NDArray[np.int64] = before + -(-offsets // layout.step)
    return order
