"""``JaxLoader`` (global batches as ``jax.Array`` s, each process reading its rows) and
``numpy_loader`` (this process's slice as NumPy, for ``make_global_batch``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from headrace._closing import Closing
from headrace._warn import warn_user
from headrace.errors import ConfigError
from headrace.jax._agree import check_agreement, spans_processes
from headrace.jax._arrays import make_global_batch
from headrace.jax._rows import fields_blocks, fields_rows
from headrace.pipeline import Batch, Loader, LoaderStats, Source
from headrace.pipeline._loader_args import launched

__all__ = ["JaxLoader", "numpy_loader"]


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

    Where its slices are every process's (a sharding over every process, or the
    default rank and world size on several), each iteration starts, as a
    :class:`JaxLoader`'s does, by comparing the processes' loaders, and loaders that
    would read rows of different global batches are refused on every process; so
    are slices whose union is not the global batch (ranks no process reads). With
    ``rank``/``world_size`` of your own, only where ``world_size`` is
    ``jax.process_count()``: a smaller one is not compared (not every process need make
    one: an evaluation on process 0 alone), and a larger one is refused where several
    processes run (with one loader a process, some ranks' rows would be read by none).
    A process waits ``HEADRACE_JAX_WAIT_S`` seconds (10 minutes) for the others to
    start iterating, with warnings naming those not arrived, then refuses. Without a
    rank of your own, a process a launcher started as one of several while jax knows of
    one (``jax.distributed.initialize()`` not called) is warned: it reads every row.
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
        rank, world_size = fields_rows(sharding, batch_size)
        ask = spans_processes(sharding)
        _warn_if_launched_alone("numpy_loader")
    elif rank is None or world_size is None:
        rank, world_size = jax.process_index(), jax.process_count()
        ask = world_size > 1
        _warn_if_launched_alone("numpy_loader")
    else:
        # Of your own, a world_size of jax.process_count() says every process makes one
        # (rank 0 on every process read one slice everywhere, and left the others unread,
        # without a word); a smaller one may be a few processes' (an evaluation on process
        # 0), and is not compared: those processes' wait for the others would never end.
        count = jax.process_count()
        _refuse_more_ranks_than_processes(rank, world_size, count)
        ask = world_size > 1 and world_size == count
    kind = _AgreedLoader if ask else Loader
    return kind(
        source, batch_size=batch_size, seed=seed, rank=rank, world_size=world_size, **loader_kwargs
    )


def _warn_if_launched_alone(kind: str) -> None:
    """Warn where jax knows of one process but a launcher (srun, mpirun, torchrun)
    started this one as one of several: ``jax.distributed.initialize()`` was not called,
    so every process reads the whole global batch, the same rows, and trains a model of
    its own, without a word (the ``Loader``'s own warning is for a rank left out, and
    the rank given here is jax's)."""
    found = launched()
    if found is None or jax.process_count() > 1:
        return
    names, count, variables = found
    warn_user(
        f"{kind}: jax.process_count() is 1, so this process reads the whole global batch, "
        f"but its launcher ({names}) started it as one of {count} ({variables}): every "
        "process would read the same rows. Call jax.distributed.initialize() at the start, "
        "before any other jax call (it reads these variables under srun and Open MPI; "
        "else give it coordinator_address, num_processes and process_id). If each process "
        "is meant as a run of its own, give numpy_loader rank=0, world_size=1, or filter "
        "this warning.",
        RuntimeWarning,
    )


def _refuse_more_ranks_than_processes(rank: int, world_size: int, count: int) -> None:
    """Refuse, before any read, a ``world_size`` above the process count of a
    multi-process run (a device count taken for it): with one loader a process, some
    ranks' rows are read by none. ``make_global_batch`` refused their row count only
    after the first read; ``jax.make_array_from_process_local_data`` without a global
    shape made a global batch of those rows alone, without a word."""
    if count == 1 or world_size <= count:
        return
    raise ConfigError(
        f"numpy_loader(rank={rank}, world_size={world_size}) on process "
        f"{jax.process_index()} of {count} (jax.process_index(), jax.process_count()): with "
        f"one loader a process, at least {world_size - count} of the {world_size} ranks "
        "would be read by no process, and their rows of each global batch never. Leave out "
        "rank and world_size (they default to jax.process_index() and "
        "jax.process_count()), give the sharding (numpy_loader(..., sharding=s)), or a "
        "world_size of at most the process count; for several loaders a process, use "
        "headrace.pipeline.Loader (numpy_loader's, not compared between processes) or "
        "JaxLoader (a Loader for each block of a sharding's rows)."
    )


class _AgreedLoader(Loader):
    """A ``numpy_loader`` whose slices are every process's: each iteration starts by
    comparing the processes' loaders (:func:`check_agreement`), as ``JaxLoader``'s do.
    Each process reads only its own rows, so a ``seed + process_index`` or a state
    loaded on one process alone gave ``make_global_batch`` rows of different global
    batches, without a word."""

    def __iter__(self) -> Iterator[Batch]:
        check_agreement(self, "numpy_loader")
        return super().__iter__()


class JaxLoader(Closing):
    """Global batches as ``jax.Array`` s laid out by ``sharding`` (one for every field, or
    a dict of one per field); each process reads its rows.

    Rows of a process that are no equal share of the batch (3 of 4 devices along its
    axis), or that interleave with another process's (``P(('model', 'data'))`` with
    ``'data'`` over processes), are read by a :class:`~headrace.pipeline.Loader` for
    each block of them, in step, and joined in row order.

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
        blocks = fields_blocks(sharding, batch_size)
        _warn_if_launched_alone("JaxLoader")
        self.sharding = sharding
        self.batch_size = batch_size
        self._ask_processes = spans_processes(sharding)
        self.loaders: list[Loader] = []
        try:
            for rank, world_size in blocks:
                self.loaders.append(
                    Loader(
                        source,
                        batch_size=batch_size,
                        seed=seed,
                        rank=rank,
                        world_size=world_size,
                        **loader_kwargs,
                    )
                )
        except BaseException:
            for made in self.loaders:
                made.close()
            raise
        #: The loader of this process's first block of rows (its only one, as a rule):
        #: its step, state and stats stand for every block's.
        self.loader = self.loaders[0]

    def __iter__(self) -> Iterator[dict[str, jax.Array]]:
        loader = self.loader
        if self._ask_processes:
            # (0, 1): the sharding's rows, which cover the batch by construction.
            check_agreement(loader, share=(0, 1))
        for other in self.loaders[1:]:
            other.step = loader.step  # where the caller set the step: on every block
        if len(self.loaders) == 1:
            yield from self._one(iter(loader))
            return
        many = [iter(ld) for ld in self.loaders]
        while True:
            at = loader.step  # the step of the next batch
            try:
                parts = [next(it, None) for it in many]
                if parts[0] is None:
                    return
                out = make_global_batch(_joined(parts), self.sharding, self.batch_size)
            except BaseException:
                for ld in self.loaders:  # as in _one
                    ld.step = at
                raise
            yield out

    def _one(self, batches: Iterator[Batch]) -> Iterator[dict[str, jax.Array]]:
        loader = self.loader
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
        for ld in self.loaders:
            ld.load_state_dict(state)

    def close(self) -> None:
        for ld in self.loaders:
            ld.close()


def _joined(parts: list[Batch | None]) -> Batch:
    """One step's blocks of rows, each a loader's batch, joined in row order."""
    got = [p for p in parts if p is not None]
    if len(got) < len(parts):  # every block's loader runs the same steps
        raise RuntimeError("the loaders of a JaxLoader's blocks of rows ended apart")
    return {k: np.concatenate([p[k] for p in got]) for k in got[0]}
