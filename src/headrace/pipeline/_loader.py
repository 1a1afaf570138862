"""The loader: this host's slice of every step, in order, optionally read ahead.

Steps are planned in chunks (one step first, for a quick first batch, then
doubling up to ``chunk_steps`` steps or ``chunk_bytes``) so planning and
gathering cost one vectorised call per chunk rather than per batch. With
``prefetch > 0`` a producer thread runs ahead of the consumer through a
bounded queue; with ``prefetch == 0`` the consumer's thread does the same
work. Both give identical batches: the plan is a pure function of
``(seed, step)``, and the queue only changes when.
"""

from __future__ import annotations

import inspect
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from headrace._closing import Closing
from headrace._warn import warn_user
from headrace.errors import ConfigError, StateError
from headrace.io import ReadInFlight, reads_in_flight
from headrace.pipeline._first_failure import step_by_step
from headrace.pipeline._host_order import by_address, check_host_order
from headrace.pipeline._layout import Batch, narrow_strings, nbytes, split_chunk, string_keys
from headrace.pipeline._loader_args import (
    check_source,
    checked_seed,
    checked_stall_warn_s,
    checked_steps,
    host_place,
    integer,
)
from headrace.pipeline._loader_types import LoaderStats, LoaderStatus, Source
from headrace.pipeline._locks import source_lock
from headrace.pipeline._passes import (
    checked_epochs,
    mark,
    pass_end,
    pass_sizes,
    starts_at,
    with_marks,
)
from headrace.pipeline._prefetch import END, STALE, Failure, Prefetcher, stale_error
from headrace.pipeline._shutdown import (
    SOURCE_CLOSE_S,
    close_source,
    closed_at_exit,
    left_behind,
)
from headrace.pipeline._stall import (
    DEFAULT_STALL_WARN_S,
    Running,
    StallWatch,
    running,
    running_now,
    stall_message,
)
from headrace.pipeline._steps import chunked, first_owned, remaining_steps, run_over, savable
from headrace.pipeline._transform import (
    Laid,
    Transform,
    apply_transform,
    checked_rows,
    transform_name,
)
from headrace.plan import (
    LoaderState,
    fingerprint_digest,
    fingerprint_parts,
    host_slice,
    legacy_digests,
    step_samples,
)

__all__ = ["CHUNK_BYTES", "DEFAULT_CHUNK_STEPS", "Loader"]

# Most bytes one chunk of steps may hold (measured: chunks of 32 token batches
# of 131 KB ran 20-45% faster than chunks of 8, from fewer per-call overheads).
CHUNK_BYTES = 64 << 20
# Most steps one chunk may hold: one vectorised plan-and-gather call per 32 batches.
DEFAULT_CHUNK_STEPS = 32


# How long stopping (and close()) waits for the producer thread to leave a read in
# progress; past it the read is left to finish in the background (:mod:`._shutdown`).
# Until 2026-12-03 it was 10 s, and close() then waited for ever on a stalled mount.
_STOP_TIMEOUT_S = 1.0
# A read left behind that has run no longer than this many times the loader's mean read
# is slow, not stalled: close() leaves it to finish without a warning. (Seen: a read of
# 800 samples, 1.2 s in on a loaded 2-core machine, called "stalled storage?")
_STRIDE = 4.0
_CLOSED_READ = "this loader is closed; make a new one to read from it again."

#: Every loader of the process, whose locks a forked child renews (:func:`_forked`).
_LOADERS: weakref.WeakSet[Loader] = weakref.WeakSet()


def _forked() -> None:
    """In a forked child: a parent's thread (a consumer between batches, a close) may
    have held a loader's locks at the fork, and never lets go of them here."""
    for loader in list(_LOADERS):
        loader._lock = threading.RLock()
        loader._closing = threading.RLock()


os.register_at_fork(after_in_child=_forked)


class _Batches(Iterator[Batch]):
    """An iteration of ``loader``: its batches (``batches``), and after an error that ended
    it (Ctrl-C, a read that failed) a :class:`StateError` at each ``next()``. A generator
    ends quietly then: a loop that caught the error and went on (a notebook's Ctrl-C, a
    retry on storage errors) ended as if the run's data were done."""

    __slots__ = ("__weakref__", "_batches", "_ended", "_generation", "_loader")

    def __init__(self, loader: Loader, batches: Iterator[Batch], generation: int) -> None:
        self._loader = loader
        self._batches = batches
        self._generation = generation
        self._ended: str | None = None  # the error that ended it, and at which step

    def __next__(self) -> Batch:
        if self._ended is not None:
            if self._loader.status is LoaderStatus.CLOSED:
                raise stale_error(closed=True)
            raise StateError(
                f"this iterator ended at {self._ended} and yields nothing more; a new "
                "iteration, iter(loader), goes on from the loader's step "
                f"({self._loader.step})"
            )
        try:
            return next(self._batches)
        except StopIteration:
            raise
        except BaseException as exc:
            self._ended = f"step {self._loader.step} with {type(exc).__name__}"
            raise

    def close(self) -> None:
        """Stop the iteration now (its read-ahead thread too), as a generator's close() does;
        also from another thread (a watchdog's) while one waits in ``next()``, which then
        raises :class:`StateError` (a generator's close() raised "ValueError: generator
        already executing" there, and the read-ahead ran on)."""
        try:
            self._batches.close()  # type: ignore[attr-defined]
        except ValueError:
            if not getattr(self._batches, "gi_running", False):
                raise
            self._loader._end(self._generation)


class Loader(Closing):
    """Iterate this host's slice of each global batch, from ``state.step`` on.

    ``batch_size`` is the *global* batch; host ``rank`` of ``world_size``
    receives ``batch_size // world_size`` samples per step (neither given: 0 of 1,
    with a warning in a process a launcher started as one of several, :func:`host_place`).
    ``steps`` ends the
    iteration (``None``: never). ``step_stride``/``step_offset`` select every
    k-th step, for data-loader workers that each own a share of the steps.
    ``transform(arrays, samples)`` runs on what the source read, in the
    read-ahead thread (or worker), with a random generator per sample keyed by
    ``(seed, sample number)`` (see :mod:`headrace.pipeline._transform`): it
    must treat rows independently and return one row per sample. It is not
    part of the state's fingerprint. ``epochs=k`` (instead of ``steps``) is an
    exact pass, for evaluation: the loader ends at the step that completes
    ``k`` epochs, and every batch carries ``sample`` and ``valid``, False for
    the rows past the pass that fill the last step (:mod:`headrace.pipeline._passes`).

    A state of another global batch size, saved at step ``k`` after ``S`` samples,
    goes on by sample: step ``t`` reads ``S + (t - k) * batch_size + [lo, hi)``
    (``origin`` is ``(k, S)``, else ``None``); a mixture or an exact pass refuses it.

    ``stall_warn_s``: a ``next()`` that has waited that long for a batch warns,
    naming the step and the reads in flight (:meth:`reads_in_flight`), again each
    time the wait doubles, and once when the batch comes (:mod:`._stall`); ``None``:
    never.
    """

    def __init__(
        self,
        source: Source,
        *,
        batch_size: int,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        prefetch: int = 8,
        chunk_steps: int = DEFAULT_CHUNK_STEPS,
        chunk_bytes: int = CHUNK_BYTES,
        steps: int | None = None,
        step_stride: int = 1,
        step_offset: int = 0,
        host_order: Literal["plan", "address"] = "plan",
        transform: Transform | None = None,
        epochs: int | None = None,
        stall_warn_s: float | None = DEFAULT_STALL_WARN_S,
    ) -> None:
        if isinstance(source, Loader):  # TorchDataset(loader, ...), JaxLoader(loader, ...)
            raise ConfigError(
                "a Loader is not a source: pass the source it reads (loader.source), with "
                "the batch size and options given here."
            )
        check_source(source, transform)
        seed, batch_size = checked_seed(seed), integer("batch_size", batch_size)
        rank, world_size = host_place(rank, world_size)
        prefetch, chunk_steps, chunk_bytes, steps, step_stride, step_offset = checked_steps(
            prefetch, chunk_steps, chunk_bytes, steps, step_stride, step_offset
        )
        self.stall_warn_s = checked_stall_warn_s(stall_warn_s)
        try:
            self._lo, self._hi = host_slice(batch_size, rank, world_size)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        check = getattr(source, "check_batch_size", None)
        if check is not None:  # a mixture apportions its own global batch: they must agree
            check(batch_size)
        self.epochs = checked_epochs(epochs, steps)
        self._pass = np.zeros(0, dtype=np.int64)  # samples of an exact pass, each source's
        if self.epochs is not None:
            self._pass = pass_sizes(source, self.epochs)
            steps = pass_end(source, batch_size, self._pass)
        self.source = source
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.prefetch = prefetch
        self.chunk_steps = chunk_steps
        self.chunk_bytes = chunk_bytes
        self._chunk_cap = chunk_steps
        self._read_lock = source_lock(source)
        self._pid = os.getpid()
        self.steps = steps
        self.step_stride = step_stride
        self.step_offset = step_offset
        # Told which stretch of each window is this host's, a source reads ahead only that.
        self._share = check_host_order(host_order, source, seed)
        # Told where the run ends, a source reads nothing ahead past it (TableSource).
        ahead = getattr(source, "prefetch", None)
        self._tell_end = ahead is not None and "end" in inspect.signature(ahead).parameters
        self.host_order = host_order
        self.transform = transform
        described = source.fingerprint()
        if host_order == "address":  # another split of each step: not the same stream
            described = {**described, "host_order": "address"}
        self._fingerprint = fingerprint_digest(described)
        self._parts = fingerprint_parts(described)
        self._legacy = legacy_digests(described)
        self._mixture = described.get("kind") == "mixture"
        self.step = 0
        # Where this batch size took over (LoaderState.origin_for); None: at the start.
        self.origin: tuple[int, int] | None = None
        self.stats = LoaderStats()
        # Through a weak reference: bound methods held here made a reference cycle, so a
        # loader dropped without close() (and its source's files and threads) lived on
        # until the cyclic collector ran, never under gc.disable() (torchtitan's gc_freq).
        me = weakref.proxy(self)
        self._watch = StallWatch(
            self.stall_warn_s, lambda: me._next_step(), lambda s, t: me._stall_said(s, t)
        )
        # The transform running now ("transform <name>", first and last step,
        # time.monotonic() at its start): a stall warning names it.
        self._transforming: Running | None = None
        # Each key's first layout out of the transform: one that follows a call's rows
        # (and so the chunking) is refused (check_laid).
        self._laid: dict[str, Laid] = {}
        self.status = LoaderStatus.IDLE
        # An iteration here has moved ``step`` since it was set (made, loaded): an exact
        # pass left part way starts over (:func:`starts_at`).
        self._moved = False
        # The last iteration's iterator (iter(self)), while it lives; None: none since made
        # or loaded, or chunks() (state_dict() names its step, as before).
        self._live: weakref.ref[_Batches] | None = None
        self._producer: Prefetcher | None = None
        # A producer that a stop left inside a read, and the steps and start time of the
        # read in progress (either thread's): what close() says it left behind.
        self._left: Prefetcher | None = None
        self._inside: tuple[int, int, float] | None = None
        # Bumped by iter(), load_state_dict() and close(): an iterator of an older
        # generation raises instead of yielding steps that no longer follow the state.
        self._generation = 0
        # Taken by any thread that iterates, loads a state or closes, to read and change
        # the generation, producer, status and state together, never over a wait (a
        # stop's join, a source's close): an iteration that another thread began while
        # load_state_dict() stopped the last one was forgotten, its thread left running
        # for ever; a step a consumer set just after load_state_dict() undid the load.
        # Reentrant: a signal handler's close() may come while its thread holds it.
        self._lock = threading.RLock()
        # Held over a whole close(): another one (another thread's, a signal handler's,
        # atexit's) returns once the first has released everything, not while it does.
        self._closing = threading.RLock()
        self._closed = False  # a close() got as far as the source's close
        # A close() under way in this thread (the only one that can see it True): a signal
        # handler's close() then returns, and the one it interrupted goes on.
        self._in_close = False
        # Producers taken from the loader (_retire) and not yet joined, by any thread; one
        # an interrupt left there is stopped by the next stop or close().
        self._stopping: set[Prefetcher] = set()
        _LOADERS.add(self)
        closed_at_exit(self)

    # -- state -------------------------------------------------------------------
    def __repr__(self) -> str:
        return (
            f"Loader({self.source!r}, batch_size={self.batch_size}, seed={self.seed}, "
            f"step={self.step}, steps={self.steps}, rank={self.rank}/{self.world_size}, "
            f"prefetch={self.prefetch}, epochs={self.epochs}, {self.status.value})"
        )

    def state_dict(self) -> dict[str, Any]:
        """The state to resume from: the next step this host has not yet received. An exact
        pass that a loop has left part way (its iterator gone: a ``break``, a sanity
        check's 2 batches) names where the next iteration starts, step 0, as that loop
        would go on: saved then, it resumed the next evaluation at the step the loop
        broke at, leaving out the samples before it."""
        with self._lock:  # never one load_state_dict() in another thread has half set
            seed, step, origin = self.seed, self.step, self.origin
            if self._live is not None and self._live() is None:
                step = starts_at(step, self.steps, self.epochs, self._moved)
        return LoaderState(
            seed=seed,
            step=step,
            batch_size=self.batch_size,
            fingerprint=self._fingerprint,
            parts=self._parts,
            origin=origin,
            epochs=self.epochs,
        ).to_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at the saved step, on any world size; with another global batch size,
        at the first sample the saved run had not read (see the class)."""
        st = LoaderState.from_dict(state)
        self.check_state(st)
        origin = st.origin_for(self.batch_size)
        # The live iteration (any thread's) is stale, and its read-ahead stopped, before
        # the state changes; one begun meanwhile (another thread's iter()) as well.
        with self._lock:
            producer = self._retire()
        self._stop(producer)
        with self._lock:
            producer = self._retire()
            self.seed, self.step, self.origin = st.seed, st.step, origin
            self._moved, self._live = False, None
        self._stop(producer)

    @property
    def made_in(self) -> int:
        """The id of the process this loader iterates in (a forked copy finds its parent's)."""
        return self._pid

    @property
    def legacy_fingerprints(self) -> tuple[str, ...]:
        """The digests that states saved before each later part of this loader's
        description have, newest first (:func:`~headrace.plan.legacy_digests`)."""
        return self._legacy

    def check_state(self, state: LoaderState) -> None:
        """Refuse a state saved on other data, or with another global batch size by a
        loader that cannot change it (a mixture, an exact pass)."""
        state.check(
            fingerprint=self._fingerprint,
            batch_size=self.batch_size,
            parts=self._parts,
            legacy=self._legacy,
            mixture=self._mixture,
            epochs=self.epochs,
        )

    def __len__(self) -> int:
        """Batches the next iteration yields (this loader's steps from ``step`` to
        ``steps``); ``TypeError`` when ``steps`` is None, as for any unsized iterable.
        For a scheduler's total, use ``steps``: after a resume this is what remains."""
        start = starts_at(self.step, self.steps, self.epochs, self._moved)
        return remaining_steps(start, self.steps, self.step_stride, self.step_offset)

    def __bool__(self) -> bool:
        return True  # not len(): an endless or finished loader is still a loader

    # -- planning ------------------------------------------------------------------
    def _own_steps(self, start: int) -> Iterator[int]:
        # self.steps is read at each step, not once: lowered while iterating, it ends
        # the chunks not planned yet (and the planned ones at it, :meth:`_ended_at`).
        k, w = self.step_stride, self.step_offset
        t = start + (w - start) % k
        while self.steps is None or t < self.steps:
            yield t
            t += k

    def _chunks(self, start: int) -> Iterator[list[int]]:
        return savable(chunked(self._own_steps(start), lambda: self.max_chunk_steps))

    def _host_samples(self, steps: list[int]) -> NDArray[np.int64]:
        """This host's sample numbers of ``steps``, step after step, in plan or address
        order (:mod:`._host_order`)."""
        # Not cast to int64: step_samples names a step past int64 (batch_at(2**64) was
        # NumPy's bare OverflowError) or a float (batch_at(1.5) read step 1).
        t = np.asarray(steps)
        if self.host_order == "plan":
            return step_samples(t, self.batch_size, self._lo, self._hi, self.origin)
        with self._read_lock:  # the source's plan cache is not thread-safe
            return by_address(
                self.source, self.seed, t, self.batch_size, (self._lo, self._hi), self.origin
            )

    def _read_arrays(self, steps: list[int], generation: int | None = None) -> Batch:
        """The chunk's batches back to back: each array's first axis is ``len(steps) * b``
        (read only while ``generation``, if given, is current: :meth:`_read_raw`)."""
        return self._transformed(steps, *self._read_raw(steps, generation=generation))

    def _again(self, generation: int) -> Callable[[list[int]], Batch]:
        """:meth:`_read_arrays` for a failed chunk's steps, read again one at a time
        (:func:`step_by_step`) while ``generation`` is current: a close() from another
        thread among those reads closed the source, and the next one reopened its files."""
        return lambda steps: self._read_arrays(steps, generation)

    def _planned(self, steps: list[int]) -> NDArray[np.int64]:
        """This host's samples of ``steps`` (:meth:`_host_samples`), timed as planning."""
        t0 = time.perf_counter()
        samples = self._host_samples(steps)
        self.stats.plan_s += time.perf_counter() - t0
        return samples

    def _read_raw(
        self,
        steps: list[int],
        samples: NDArray[np.int64] | None = None,
        *,
        generation: int | None = None,
    ) -> tuple[Batch, NDArray[np.int64], Batch]:
        """What the source read for the chunk (its ``samples``, planned here if not
        given), before any transform, its samples, and an exact pass's marks of them
        (none without ``epochs``). ``generation``: an iteration's, whose read is refused
        (:func:`stale_error`) once it is not current, asked under the source's lock, which
        close() takes to close it: never read after the close, reopening its files. Without
        it (:meth:`batch_at`), refused once the loader is closed."""
        stats = self.stats
        if samples is None:
            samples = self._planned(steps)
        t1 = time.perf_counter()
        # Sources keep caches (windows, plans) that are not thread-safe; batch_at may
        # run while the producer thread reads, and another Loader over the same source
        # (a re-iteration) while this one's producer finishes a slow read: the lock is
        # the source's, not the loader's. An uncontended lock costs ~0.1 us.
        marks: Batch = {}
        with self._read_lock:
            if generation is not None:
                self._check_current(generation)
            elif self.status is LoaderStatus.CLOSED:  # by another thread since batch_at asked
                raise ConfigError(_CLOSED_READ)
            self._inside = (steps[0], steps[-1], time.monotonic())
            try:
                arrays = self.source.read(self.seed, samples)
                if self.epochs is not None:
                    # Marked now: a mixture answers from the samples it has just read (the
                    # next chunk's read-ahead replaces them; planned again: +50% a batch).
                    marks = mark(self.source, self.seed, samples, self._pass)
            finally:
                self._inside = None
        arrays = checked_rows(f"{type(self.source).__name__}.read", arrays, samples.size)
        stats.source_s += time.perf_counter() - t1
        stats.chunks += 1
        stats.steps += len(steps)
        # A Mapped source (or a mixture of them) read more than it returned.
        self._cap_chunks(steps, arrays, held=getattr(self.source, "held_bytes", 0))
        return arrays, samples, marks

    def _transformed(
        self, steps: list[int], arrays: Batch, samples: NDArray[np.int64], marks: Batch
    ) -> Batch:
        if self.transform is not None:
            t0 = time.perf_counter()
            name = transform_name(self.transform)
            try:
                with running(f"transform {name}", steps[0], steps[-1]) as self._transforming:
                    arrays = apply_transform(self.transform, arrays, self.seed, samples, self._laid)
            finally:
                self._transforming = None
            self.stats.transform_s += time.perf_counter() - t0
            self._cap_chunks(steps, arrays, also=self._chunk_cap)
        if not marks:
            return arrays
        made = f"{type(self.source).__name__}" + (" with its transform" * bool(self.transform))
        return with_marks(arrays, marks, self.epochs, made)

    def _cap_chunks(
        self, steps: list[int], arrays: Batch, also: int | None = None, held: int = 0
    ) -> None:
        """Cap chunks by bytes as well as steps, so large batches never make a chunk
        (held by the queue and the consumer) grow past ``chunk_bytes``; with a
        transform, by what the source read as well as what the transform returned
        (``also``: the cap the read set). Capped by the output only, a crop of
        640 x 640 images to 224 x 224 let a chunk decode 8x ``chunk_bytes``. ``held``:
        what the source held before its own transform (a Mapped source's crop)."""
        # The samples' own bytes: images of several sizes are an object array of pointers.
        per_step = max(1, max(nbytes(arrays), held) // len(steps))
        cap = max(1, self.chunk_bytes // per_step)
        self._chunk_cap = cap if also is None else min(cap, also)

    @property
    def max_chunk_steps(self) -> int:
        """Most steps a chunk holds: ``chunk_steps``, or fewer once a read showed
        that many would exceed ``chunk_bytes``."""
        return min(self.chunk_steps, self._chunk_cap)

    def _split(self, steps: list[int], arrays: Batch) -> list[tuple[int, Batch]]:
        return split_chunk(steps, arrays, self._hi - self._lo)

    def batch_at(self, step: int) -> Batch:
        """This host's batch of ``step``, read now (random access; no state change)."""
        if self.status is LoaderStatus.CLOSED:  # it reopened the source's files, silently
            raise ConfigError(_CLOSED_READ)
        self._own_process()  # in a forked child: not the parent's lock, perhaps held
        arrays = self._read_arrays([step])
        return narrow_strings(arrays, string_keys(arrays))  # as iteration gives them

    # -- iteration -------------------------------------------------------------------
    def _own_process(self) -> None:
        """In a process forked from the one that made this loader: its producer thread
        and read lock stayed there; take this process's lock (which renews the source)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            # Its producers (and their threads) are not this process's, nor was its
            # close(); its locks are new (:func:`_forked`).
            self._producer, self._left, self._stopping = None, None, set()
            self._closed = self._in_close = False
            self._read_lock = source_lock(self.source)

    def __iter__(self) -> Iterator[Batch]:
        start, generation = self._begin()
        if self.prefetch == 0:
            batches = _Batches(self, self._iter_sync(start, generation), generation)
        else:
            batches = _Batches(self, self._iter_async(start, generation), generation)
        with self._lock:
            if generation == self._generation:  # (not superseded by another thread's)
                self._live = weakref.ref(batches)
        return batches

    def _begin(self, *, warn: bool = True) -> tuple[int, int]:
        """Stop the iteration under way (any thread's) and begin one: its first step and
        generation. ``warn``: say so if it yields nothing (:func:`run_over`)."""
        self._refuse_closed()
        self._own_process()
        with self._lock:
            producer = self._retire()
        self._stop(producer)
        with self._lock:
            self._refuse_closed()  # by another thread while the stop waited for a read
            # Another thread's iteration, begun while the stop waited, is stale too.
            producer = self._retire()
            self._pass_over()
            self._moved, self._live = True, None
            again = self.status is LoaderStatus.RUNNING  # iterated before: not a fresh start
            self.status = LoaderStatus.RUNNING
            start, generation = self.step, self._generation
        self._stop(producer)
        if warn and again and self.step_stride == 1 and self.steps is not None:
            if not remaining_steps(start, self.steps):
                warn_user(run_over("Loader", start, self.steps), RuntimeWarning, varies=True)
        return start, generation

    def _refuse_closed(self) -> None:
        """Refuse to iterate a closed loader: it would reopen the source's files. Asked
        again once the old read-ahead has stopped: a close() from another thread during
        that wait was undone (the loader set running again, reading the closed source)."""
        if self.status is LoaderStatus.CLOSED:
            raise ConfigError("this loader is closed; make a new one to iterate again.")

    def _pass_over(self) -> None:
        """An exact pass that is over, or left part way, starts again at step 0
        (:func:`starts_at`)."""
        self.step = starts_at(self.step, self.steps, self.epochs, self._moved)

    def _check_current(self, generation: int) -> None:
        if generation != self._generation:
            raise stale_error(closed=self.status is LoaderStatus.CLOSED)

    def chunks(self) -> Iterator[tuple[list[int], Batch]]:
        """This host's steps from ``step`` on, a chunk at a time, read in this thread.

        Each item is ``(steps, arrays)``: the chunk's batches back to back, so
        step ``steps[i]``'s batch is ``arrays[k][i * b : (i + 1) * b]`` for
        ``b = batch_size // world_size``, laid out by :func:`lay_out` where the
        chunk holds ragged keys (as iteration gives it: a step whose samples
        agree is dense even if its chunk is not). What worker processes hand over:
        one copy and one message per chunk. ``step`` advances past each chunk
        as it is handed out.
        """
        start, generation = self._begin(warn=False)
        # Watched as iteration without read-ahead is: a worker process's loader warned
        # of none of its stalls (its chunks were read unwatched).
        for steps, arrays in self._watched_chunks(start, generation):
            with self._lock:
                self._check_current(generation)
                self.step = steps[-1] + 1
            yield steps, arrays

    def _read_ahead(self, start: int, generation: int) -> Iterator[tuple[list[int], Batch]]:
        """Read chunk after chunk; after each, tell the source what comes next.

        A source with ``prefetch(seed, samples)`` starts the next chunk's reads
        while this one is transformed and consumed: same bytes, earlier I/O. A source
        with ``followed_by(seed, samples)`` is told before each read which samples
        the next read asks for (none after the last step), so that it can fill the
        slots this read's last fetches free without guessing. The first chunk
        (one step) is handed over before anything is read ahead, so the first
        batch waits for its own blocks only, not for read-ahead sharing the
        storage with them. Under ``host_order="address"`` the source is first
        told this host's share (with the first chunk's samples), so that it
        reads only its share from the first window on.

        After ``close()`` (or a newer iteration) it raises the stale iterator's error
        instead of reading on, also when a read that a close gave up on returns: nothing
        more is read ahead, read again or reopened then.

        A read-ahead that fails is the chunk's it was for, not the chunk being handed
        out: that chunk's read finds the error a step at a time; if the read succeeds,
        the read-ahead's error is raised at its first step, as one that does not recur.
        """
        # Begun after a close() (or a newer iteration): nothing is told or read, as a
        # source told its share reopened its files.
        self._check_current(generation)
        # Each chunk's samples are planned once, for the read-ahead calls and the read.
        chunks = ((steps, self._planned(steps)) for steps in self._chunks(start))
        current = next(chunks, None)
        ahead: Exception | None = None  # the error of the read-ahead started for current
        if current is not None and self._share:
            # Told its share before its first read, a source reads only that from the start.
            ahead = self._prefetch(current[1], generation)
        first = True
        refused: Exception | None = None
        while current is not None:
            self._check_current(generation)
            try:
                following = next(chunks, None)
            except Exception as exc:
                # The next chunk's steps refused (past the last a state can follow, or
                # past the sample numbers): this chunk's batches are handed out first.
                following, refused = None, exc
            self._followed_by(None if following is None else following[1], generation)
            steps = current[0]
            try:
                raw = self._read_raw(*current, generation=generation)
            except Exception as exc:
                if generation != self._generation:  # failed under a close(): no retry
                    raise
                yield from step_by_step(steps, self._again(generation), exc)
                raise  # step_by_step raises: not reached
            self._check_current(generation)
            if ahead is not None:
                raise ahead
            if first:
                yield from self._transform_chunk(steps, raw, generation)
                # Resumed after a close() (or a newer iteration): the next chunk is not
                # read ahead, as a closed source told of it reopened its files.
                self._check_current(generation)
            if following is not None:
                ahead = self._prefetch(following[1], generation)
            if not first:
                # Transformed after the next chunk's reads are started, so storage
                # is busy while the transform runs.
                yield from self._transform_chunk(steps, raw, generation)
            first = False
            current = following
        # Past its last chunk too: an iterator whose loader was closed, rolled back or
        # iterated anew meanwhile did not end quietly (without read-ahead) as if done.
        self._check_current(generation)
        if refused is not None:
            raise refused

    def _transform_chunk(
        self, steps: list[int], raw: tuple[Batch, NDArray[np.int64], Batch], generation: int
    ) -> Iterator[tuple[list[int], Batch]]:
        """The chunk, transformed; a transform that fails (on a row it refuses) fails the
        chunk, which is read again a step at a time, as a failed read is."""
        try:
            arrays = self._transformed(steps, *raw)
        except Exception as exc:
            yield from step_by_step(steps, self._again(generation), exc)
            raise  # step_by_step raises: not reached
        yield steps, arrays

    def _followed_by(self, samples: NDArray[np.int64] | None, generation: int) -> None:
        """Tell the source (if it asks) which samples follow the read about to be made
        (``None``: none, the read is the last), while ``generation`` is current."""
        followed_by = getattr(self.source, "followed_by", None)
        if followed_by is not None:
            with self._read_lock:
                self._check_current(generation)  # not after close(): see _read_raw
                followed_by(self.seed, np.empty(0, np.int64) if samples is None else samples)

    def _prefetch(self, ahead: NDArray[np.int64], generation: int) -> Exception | None:
        """Tell the source (if it reads ahead) which samples come next, while
        ``generation`` is current; the error it raised, if any, for the read of those
        samples to raise (:meth:`_read_ahead`)."""
        prefetch = getattr(self.source, "prefetch", None)
        if prefetch is None:
            return None
        t1 = time.perf_counter()
        kw: dict[str, Any] = {}
        if self._share:
            kw["share"] = (self._lo / self.batch_size, self._hi / self.batch_size)
        end = self._planned_end() if self._tell_end else None
        if end is not None:
            kw["end"] = end
        with self._read_lock:
            self._check_current(generation)  # not after close(): see _read_raw
            try:
                prefetch(self.seed, ahead, **kw)
            except Exception as exc:
                return exc
            finally:
                self.stats.prefetch_s += time.perf_counter() - t1
        return None

    def _planned_end(self) -> int | None:
        """The first sample number past this loader's last own step (``None``: no last
        step): a source's read-ahead past it fetches what no step reads (until 2026-12-07
        a table's next window, at the end of every bounded run and of each worker's)."""
        if self.steps is None:
            return None
        k, w = self.step_stride, self.step_offset
        last = self.steps - 1 - (self.steps - 1 - w) % k
        if last < (self.origin or (0, 0))[0]:
            return None
        b = self.batch_size
        return int(step_samples(np.array([last]), b, 0, b, self.origin)[-1]) + 1

    def _stall_said(self, waited_s: float, step: int) -> str:
        """The stall warning: this process's reads in flight, and the transform and
        Mapped fns running (a source's function, run inside a read: of the steps read)."""
        functions = [] if self._transforming is None else [self._transforming]
        inside = self._inside
        for what, _, _, t0 in running_now():
            if what.startswith("Mapped fn "):  # (other loaders' transforms are not ours)
                first, last = (-1, -1) if inside is None else inside[:2]
                functions.append((what, first, last, t0))
        return stall_message(waited_s, step, reads_in_flight(), functions)

    def _next_step(self) -> int:
        """The next step this loader yields (its own: every k-th with a ``step_stride``)."""
        return first_owned(self.step, self.step_stride, self.step_offset)

    def reads_in_flight(self) -> list[ReadInFlight]:
        """The reads running now in this process, oldest first, each with its file or
        object URL, byte range and age, and the opens, stats and listings of local
        paths (:func:`headrace.io.reads_in_flight`): what a watchdog of the training
        loop may log while a step waits."""
        return reads_in_flight()

    def _watched_chunks(self, start: int, generation: int) -> Iterator[tuple[list[int], Batch]]:
        """:meth:`_read_ahead`'s chunks, each read in this thread, which may be stuck in
        the kernel: watched from another (the stall warnings' watcher thread)."""
        chunks = self._read_ahead(start, generation)
        while True:
            with self._watch.watched():
                try:
                    chunk = next(chunks, None)
                except Exception as exc:
                    # Named as the read-ahead's failures are (the steps before it were
                    # handed over, so this loader's next own step is the one that failed):
                    # without read-ahead the error said no step until 2026-12-06.
                    k, w = self.step_stride, self.step_offset
                    step = self.step + (w - self.step) % k
                    exc.add_note(f"while reading step {step} (rank {self.rank})")
                    raise
            if chunk is None:
                return
            yield chunk

    def _ended_at(self, step: int) -> bool:
        """Whether ``step`` is past ``steps``, lowered while iterating after its chunk was
        planned (or read ahead): it ends the iteration there, as one planned since does."""
        return self.steps is not None and step >= self.steps

    def _iter_sync(self, start: int, generation: int) -> Iterator[Batch]:
        for steps, arrays in self._watched_chunks(start, generation):
            for t, batch in self._split(steps, arrays):
                moved = False
                try:
                    with self._lock:  # load_state_dict() in another thread: its step stays
                        self._check_current(generation)
                        if self._ended_at(t):
                            return
                        moved = True
                        self.step = t + 1
                except BaseException:
                    if moved:
                        self._step_back(t, generation)
                    raise
                yield batch

    def _iter_async(self, start: int, generation: int) -> Iterator[Batch]:
        # The queue holds whole chunks, so its cost is paid once per chunk, not per
        # batch: at least ``prefetch`` batches wait ready (one chunk, or more).
        producer = Prefetcher(
            (
                (steps, self._split(steps, arrays))
                for steps, arrays in self._read_ahead(start, generation)
            ),
            start,
            depth=max(1, self.prefetch // self.chunk_steps),
        )
        stats = self.stats
        try:
            with self._lock:  # never started once stale: no iter() or close() stops it then
                self._check_current(generation)  # stale before its first next(): no thread
                self._producer = producer
                # Started inside the try: a Ctrl-C while start() waits for the thread must
                # still stop it (the loader holds it as its producer: nothing else would).
                producer.start()
            while True:
                item, waited_s = producer.get(self._watch)
                stats.queue_wait_s += waited_s
                if item is END:
                    return
                if item is STALE:
                    # Only a stopped producer's queue gets it (by iter(), load_state_dict()
                    # or close()), which may wake us before the generation is bumped.
                    raise self._stale(producer)
                if isinstance(item, Failure):
                    raise self._failed(item)
                for t, batch in item:  # type: ignore[attr-defined]
                    moved = False
                    try:
                        with self._lock:  # load_state_dict() in another thread: its step stays
                            if generation != self._generation:
                                raise self._stale(producer)
                            if self._ended_at(t):
                                return
                            moved = True
                            self.step = t + 1
                    except BaseException:
                        if moved:
                            self._step_back(t, generation)
                        raise
                    yield batch
        finally:
            with self._lock:  # unless another thread took it to stop (_retire)
                mine = self._producer is producer
                if mine:
                    self._producer = None
                    self._stopping.add(producer)
            if mine:
                self._stop(producer)

    def _step_back(self, t: int, generation: int) -> None:
        """Undo the step's move past ``t`` that an exception cut off before step ``t``'s
        batch was handed over: a Ctrl-C lands at a call, and the lock's release after the
        move is one. The step stayed one past a batch nobody received, which a notebook's
        next loop (and a state saved then) skipped. Not where the loader was loaded, closed
        or iterated anew meanwhile (another generation's step is its own)."""
        with self._lock:
            if generation == self._generation and self.step == t + 1:
                self.step = t

    def _failed(self, failure: Failure) -> BaseException:
        """The read-ahead's error, noted with the step it failed at (:meth:`_failed_at`)."""
        failure.exc.add_note(f"while reading step {self._failed_at(failure)} (rank {self.rank})")
        return failure.exc

    def _failed_at(self, failure: Failure) -> int:
        # The producer names the step after the last it handed over; this loader's own
        # steps may be every k-th (a worker's share): its next.
        return first_owned(failure.step, self.step_stride, self.step_offset)

    def _stale(self, producer: Prefetcher) -> StateError:
        """The stale iterator's error (:func:`stale_error`), caused by the read-ahead's
        error that waited in the queue, not yet raised, when the iteration went stale: a
        close() dropped it with the queue, and the next ``next()`` said only "closed"."""
        exc = stale_error(closed=self.status is LoaderStatus.CLOSED)
        failure = producer.unconsumed()
        if failure is not None:
            error = self._failed(failure)
            exc.add_note(
                f"the read-ahead had met an error at step {self._failed_at(failure)} that "
                f"this iterator had not raised yet (its cause above): "
                f"{type(error).__name__}: {error}"
            )
            exc.__cause__ = error
        return exc

    def _end(self, generation: int) -> None:
        """End the iteration of ``generation``, if it is still the loader's: its ``next()``
        under way in another thread raises, and its read-ahead stops (:meth:`_Batches.close`)."""
        with self._lock:
            producer = self._retire() if generation == self._generation else None
        self._stop(producer)

    def _retire(self) -> Prefetcher | None:
        """End the iteration under way (its iterator is stale from here) and take its
        producer, for the caller to stop (:meth:`_stop`) once it has let go of the lock."""
        self._generation += 1
        producer, self._producer = self._producer, None
        if producer is not None:
            self._stopping.add(producer)
        return producer

    def _stop(self, producer: Prefetcher | None, timeout: float | None = None) -> bool:
        """Stop a producer thread :meth:`_retire` took; ``False`` if it is still inside a
        read after the wait.

        Such a thread finishes that read in the background (:meth:`Prefetcher.stop`).
        It holds the source's read lock meanwhile, so a new iteration (of this loader,
        or of a new one over the same source) waits for it rather than reading beside it.
        An interrupt in the wait leaves it in :attr:`_stopping`, for close() to stop.
        """
        if producer is None:
            return True
        stopped = producer.stop(_STOP_TIMEOUT_S if timeout is None else timeout)
        with self._lock:
            self._stopping.discard(producer)
            if not stopped:
                self._left = producer
        return stopped

    def _in_stride(self, inside: tuple[int, int, float] | None) -> bool:
        """Whether the read a stop gave up on (``inside``, as :attr:`_inside` held it) has
        run no longer than :data:`_STRIDE` times this loader's mean read so far: slow
        (large batches to decode, a loaded machine), not stalled. It ends on its thread
        soon, and the source is closed then, without a warning that asks about storage."""
        stats = self.stats
        if inside is None or stats.chunks == 0:
            return False  # no read has returned yet: nothing says how long one takes
        return time.monotonic() - inside[2] <= _STRIDE * stats.source_s / stats.chunks

    def _left_reading(self) -> bool:
        """Whether a producer that a stop gave up on is still inside its read."""
        if self._left is not None and not self._left.thread.is_alive():
            self._left = None
        return self._left is not None

    def _unwound(self, producers: list[Prefetcher], timeout: float) -> bool:
        """Wait up to ``timeout`` for the threads of ``producers`` (and of one left
        inside a read) to end; whether all have."""
        deadline = time.monotonic() + timeout
        threads = [p.thread for p in producers]
        if self._left is not None:
            threads.append(self._left.thread)
        for thread in threads:
            if thread.is_alive():  # (a thread an interrupt kept from starting: not joined)
                thread.join(max(0.0, deadline - time.monotonic()))
        return not self._left_reading() and not any(t.is_alive() for t in threads)

    # -- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        """Stop the producer thread and release the source's files, within about 1.2 s.

        A read still waiting on storage then is ended by the source's close(), where
        that cancels it (an object store's requests), and its thread joined; one stuck
        in the kernel (a hung mount) is left behind on its daemon thread, and the
        source is closed when it returns (:mod:`._shutdown`); a ``RuntimeWarning``
        says so, naming the reads in flight, unless that read has so far run no
        longer than 4x this loader's mean read (slow, not stalled). Closing again
        does nothing; a close() from another thread (or a signal handler) while one
        runs returns once that one is done, and the next close() finishes one that an
        interrupt cut short.
        """
        if self._closed and self._pid == os.getpid():
            return
        self._close(_STOP_TIMEOUT_S, warn=True)

    def _close(self, timeout: float, *, warn: bool) -> None:
        self._own_process()  # in a forked child: not the parent's thread and lock, perhaps held
        with self._closing:
            if self._closed or self._in_close:
                return
            self._in_close = True
            try:
                self._close_now(timeout, warn=warn)
            finally:
                self._in_close = False

    def _close_now(self, timeout: float, *, warn: bool) -> None:
        t0 = time.monotonic()
        # First: a read that returns after the stop gave up on it reads nothing more
        # (:meth:`_read_ahead`), and the iterator it wakes says the loader is closed.
        with self._lock:
            inside = self._inside
            self.status = LoaderStatus.CLOSED
            self._retire()
            # Those being stopped by other threads too (an iter(), an iterator's end),
            # and one an interrupt left there: none runs on after close() returns.
            stopping = list(self._stopping)
        if self._left_reading():
            # An earlier stop (the iterator's, as Ctrl-C left it) waited for that read
            # already: no second wait, only the source's close (1.2 s, not 2 s, measured).
            timeout = SOURCE_CLOSE_S
        stopped = True
        for producer in stopping:
            wait = max(0.0, timeout - (time.monotonic() - t0))
            stopped = self._stop(producer, wait) and stopped
        stopped = stopped and not self._left_reading()
        close = getattr(self.source, "close", None)
        if close is None:
            closed = True
        else:
            # Another Loader (or Mixture) over the same source may be inside a read:
            # close between its reads, never under one (:func:`close_source`).
            left = max(timeout - (time.monotonic() - t0), SOURCE_CLOSE_S)
            try:
                closed = close_source(close, self._read_lock, left, under_read=not stopped)
            except Exception:
                self._closed = True  # the source's own error, raised once: not closed again
                raise
            if closed and not stopped:
                # It closed under the read lock: the read the stop gave up on has returned
                # (an object store's close() cancels its requests in flight), and its
                # thread only unwinds now: joined (until 2026-12-07 left behind, and warned
                # of as stalled storage, for every object store that stopped answering),
                # within the close's bound (a transform it runs after a read may be long).
                left = max(timeout + SOURCE_CLOSE_S - (time.monotonic() - t0), SOURCE_CLOSE_S)
                stopped = self._unwound(stopping, left)
        self._closed = True  # before the warning: -W error must not undo the close
        slow = not stopped and self._in_stride(inside)  # ends soon; the source closes then
        if warn and not (stopped and closed) and not slow:
            warn_user(
                left_behind(
                    type(self.source).__name__,
                    stopped,
                    inside,
                    time.monotonic() - t0,
                    reads_in_flight(),
                ),
                RuntimeWarning,
                varies=True,
            )
