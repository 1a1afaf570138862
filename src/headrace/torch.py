"""PyTorch adapter: an ``IterableDataset`` whose workers each produce whole batches.

``DataLoader(TorchDataset(...), batch_size=None, num_workers=k)`` yields the
global step order for any ``k``: worker ``w`` of ``k`` owns the steps ``t``
with ``(t - phase) % k == w`` (``phase`` is the step the iteration started
at), and the DataLoader collects from its workers round-robin, in order. A
worker is an ordinary :class:`~headrace.pipeline.Loader` with
``step_stride=k``: it plans, reads ahead and slices this host's share on its
own, with no coordination, because the plan is a pure function of the step.

Batches are dicts of tensors made by ``torch.from_numpy`` (no copy). Token
sources give ``x`` and ``y`` as two strided views of one ``(B, L + 1)``
array; they are handed to torch as views: through a worker queue the shared
storage then crosses into shared memory once, instead of two contiguous
copies being made and sent (``contiguous=True`` makes the copies anyway).

:class:`HeadraceDataLoader` ``(num_workers=k)`` runs worker processes of its
own instead of a DataLoader's: each writes whole chunks of batches into a
ring of shared-memory slots and sends only ``(first step, steps, slot)``; the
tensors are views of the slot, lent until the last of them is freed (see
``headrace._shm_ring``).

Progress: with ``num_workers == 0`` the dataset itself knows the consumer's
step (``state_dict()``). With workers, each worker reads ahead of the
consumer, so the step the *consumer* reached is counted by
:class:`HeadraceDataLoader` (any worker count on resume) or by torchdata's
``StatefulDataLoader``, which calls the dataset's ``state_dict`` inside each
worker (resume with the same worker count, as StatefulDataLoader requires).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import lru_cache
from multiprocessing import forkserver
from multiprocessing.context import BaseContext
from typing import Any, Literal

import numpy as np

from headrace._messages import framework_missing

try:
    import torch
except ModuleNotFoundError as exc:
    if exc.name != "torch":  # one of an installed torch's own dependencies: its error says which
        raise
    raise framework_missing("headrace.torch", "torch") from exc
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from headrace._closing import Closing
from headrace._pack import Packed, pack, unpack
from headrace._shm_ring import RingConfig, WorkerBatches, mp_context
from headrace.errors import ConfigError, DataError, StateError
from headrace.pipeline import DEFAULT_CHUNK_STEPS, Batch, Loader, Source, Transform
from headrace.pipeline._steps import remaining_steps
from headrace.plan import LoaderState

__all__ = [
    "HeadraceDataLoader",
    "Packed",
    "TorchDataset",
    "dist_rank_world",
    "pack",
    "tensors_of",
    "to_tensors",
    "unpack",
]

TensorBatch = dict[str, torch.Tensor]


# Most bytes of a chunk in a worker process: a chunk is a ring slot, and each worker has
# prefetch_factor + 1 of them (large batches make chunks of fewer steps).
WORKER_CHUNK_BYTES = 16 << 20


def dist_rank_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """``(rank, world_size)``: as given, else from ``torch.distributed``, else ``(0, 1)``."""
    if (rank is None) != (world_size is None):
        raise ConfigError(
            f"give both rank and world_size, or neither (got {rank=}, {world_size=})."
        )
    if rank is not None and world_size is not None:
        return rank, world_size
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def tensors_of(packed: Packed, *, pin_memory: bool = False) -> TensorBatch:
    """The fields of :func:`pack` as tensors: one storage per base (``torch.from_numpy``)."""
    bases, fields = packed
    ts = [torch.from_numpy(b) for b in bases]
    if pin_memory:
        ts = [t.pin_memory() for t in ts]
    return {
        name: ts[i].as_strided(shape, strides, off)
        for name, (i, off, shape, strides) in fields.items()
    }


def to_tensors(
    batch: Batch, *, contiguous: bool = False, pin_memory: bool = False, share: bool = False
) -> TensorBatch:
    """Tensors sharing memory with the arrays (``torch.from_numpy``); views stay views.

    ``share=True`` (implied by ``pin_memory``) makes fields that view one
    stretch of memory views of one tensor storage, as :func:`pack` does: it
    pays where the storage is copied afterwards (pinned, or put into shared
    memory by a worker queue), and costs a few microseconds of Python
    otherwise. Read-only fields, and fields with negative strides, are
    copied either way.
    """
    batch = _tensorable(batch)
    if contiguous:
        batch = {k: np.ascontiguousarray(a) for k, a in batch.items()}
    if not (share or pin_memory):
        out = {}
        for k, a in batch.items():
            if not (a.flags.writeable and _plain_strides(a.strides, a.itemsize)):
                break
            out[k] = torch.from_numpy(a)
        else:  # every field shared as it is: the common case, ~2.5 us for x and y
            return out
    return tensors_of(pack(batch), pin_memory=pin_memory)


def _tensorable(batch: Batch) -> Batch:
    """``batch`` as torch can take it: fields of another byte order (big-endian NPY
    arrays, read as stored) converted to this machine's, which torch.from_numpy
    refuses; fields torch has no tensor for refused by name (a ragged field, samples
    of several shapes as an object array, or a structured NPY array would fail in
    torch with no hint of which)."""
    out = batch
    for k, a in batch.items():
        if a.dtype == object:
            raise DataError(
                f"field {k!r} holds samples of different shapes (an object array), which "
                "make no tensor: give them one shape with a transform (headrace.transforms."
                "RandomCrop, RandomResizedCrop, or your own) or collate them yourself; "
                "images of several channel counts (PNGs mixing grey, RGB and RGBA) take one "
                "with FileSource(..., image_mode='RGB'); HDF5 variable-length strings and "
                "arrays come as object arrays too"
            )
        if a.dtype.kind not in "biufc":
            raise DataError(
                f"field {k!r} has dtype {a.dtype}, which torch has no tensor type for "
                "(structured, datetime, string and void arrays): turn it into numbers with "
                "a transform (e.g. one field per struct member, datetimes as int64 with "
                "a.view('int64')) or leave it out of the batch"
            )
        if not a.dtype.isnative:
            if out is batch:
                out = dict(batch)
            out[k] = a.astype(a.dtype.newbyteorder("="))
    return out


@lru_cache(maxsize=256)
def _plain_strides(strides: tuple[int, ...], itemsize: int) -> bool:
    """Whether ``torch.from_numpy`` can share an array with these strides (no negative or
    partial-element strides); cached, as every batch of a run has the same layout."""
    return all(s >= 0 and s % itemsize == 0 for s in strides)


class TorchDataset(IterableDataset[TensorBatch]):
    """This host's slice of every global batch, as tensors, split over DataLoader workers.

    Use with ``DataLoader(ds, batch_size=None, num_workers=k)``: batching is
    done here, a whole batch per step. ``rank``/``world_size`` default to
    ``torch.distributed``'s when it is initialised (create the dataset after
    ``init_process_group``), else ``0``/``1``. ``prefetch`` and
    ``chunk_steps`` are each worker's :class:`~headrace.pipeline.Loader`
    read-ahead (32 steps a chunk by default, with or without workers: with
    :class:`HeadraceDataLoader` workers, chunks of 32 took 0.75x the CPU
    per batch of chunks of 8, since a chunk is one copy and one message each
    way). ``host_order`` is the :class:`~headrace.pipeline.Loader`'s (``"address"``:
    each host reads its stretch of every window). ``pin_memory`` pins in the
    process that iterates, so it is only for
    ``num_workers=0``: pinned pages do not survive a worker queue (pass
    ``pin_memory=True`` to the DataLoader instead). ``transform`` is the
    :class:`~headrace.pipeline.Loader`'s, run where the reading happens (in
    the workers, with workers), so it must pickle (a module-level function or
    an instance of a module-level class).
    """

    def __init__(
        self,
        source: Source,
        *,
        batch_size: int,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        steps: int | None = None,
        pin_memory: bool = False,
        contiguous: bool = False,
        prefetch: int = 8,
        chunk_steps: int = DEFAULT_CHUNK_STEPS,
        host_order: Literal["plan", "address"] = "plan",
        transform: Transform | None = None,
    ) -> None:
        super().__init__()
        self.rank, self.world_size = dist_rank_world(rank, world_size)
        self._rank_given = rank is not None
        if pin_memory and not torch.accelerator.is_available():
            raise ConfigError(
                "pin_memory=True needs an accelerator (torch.accelerator.is_available() is "
                "False); pin only on a machine with a GPU."
            )
        # A throwaway loader checks the config now, in the main process, not in a worker.
        check = Loader(
            source,
            batch_size=batch_size,
            seed=seed,
            rank=self.rank,
            world_size=self.world_size,
            prefetch=prefetch,
            chunk_steps=chunk_steps,
            steps=steps,
            host_order=host_order,
            transform=transform,
        )
        self.source = source
        # As the loader checked them: Python ints (it takes NumPy integers too), so
        # the state stays JSON-able.
        self.batch_size = check.batch_size
        self.seed = check.seed
        self.steps = check.steps
        self.pin_memory = pin_memory
        self.contiguous = contiguous
        self.prefetch = prefetch
        self.chunk_steps = chunk_steps
        self.host_order = host_order
        self.transform = transform
        # The loader's own: it covers the host order as well as the data.
        described = check.state_dict()
        self.fingerprint, self._parts = described["fingerprint"], described["parts"]
        self._legacy = check.legacy_fingerprints
        self._mixture = source.fingerprint().get("kind") == "mixture"  # as the loader tells
        self._start = 0  # the step the next iteration starts at
        self._phase = 0  # worker w owns steps t with (t - phase) % k == w
        self._loader: Loader | None = None  # this process's live worker loader
        # The process this copy serves: another one is a DataLoader worker's copy (forked
        # or unpickled), which notes where the main process's dataset stood (_arrive).
        self._pid = os.getpid()
        self._origin = (self._start, self._phase, self.seed)
        self._loaded = False  # a state loaded here since the last iteration began
        self._loads = 0  # states loaded in all: an iteration over it began before one is stale

    # -- state -------------------------------------------------------------------
    def state_at(self, step: int) -> dict[str, Any]:
        """The state that resumes every worker at global ``step`` (for stock DataLoaders)."""
        state = LoaderState(
            seed=self.seed,
            step=step,
            batch_size=self.batch_size,
            fingerprint=self.fingerprint,
            parts=self._parts,
        ).to_dict()
        # Checked as a loaded state is, now: a NumPy step kept as it was made a state that
        # json.dumps refuses and torch.load(weights_only=True) fails to restore.
        return LoaderState.from_dict(state).to_dict()

    def state_dict(self) -> dict[str, Any]:
        """The state of the iteration running in this process (torchdata's ``Stateful``).

        In a DataLoader worker that is the worker's own position (what
        ``StatefulDataLoader`` saves per worker); with ``num_workers=0`` it is
        the consumer's step. In a main process whose workers do the reading it
        is only the start step: count the consumer's steps with
        :class:`HeadraceDataLoader` instead.
        """
        if self._loader is None:
            return {**self.state_at(self._start), "phase": self._phase}
        return {**self._loader.state_dict(), "phase": self._phase}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Start the next iteration (every worker of it) at the saved step."""
        st = LoaderState.from_dict(state)
        st.check(
            fingerprint=self.fingerprint,
            batch_size=self.batch_size,
            parts=self._parts,
            legacy=self._legacy,
            mixture=self._mixture,
        )
        phase = state.get("phase", st.step)
        if isinstance(phase, bool) or not isinstance(phase, int | np.integer) or phase < 0:
            raise StateError(f"loader state has phase {phase!r}; expected an integer >= 0")
        phase = int(phase)
        self._arrive()  # first: a copy that has just come (whatever a loader sets up first)
        self._start, self._phase, self.seed = st.step, phase, st.seed
        self._loaded = True
        self._loads += 1
        # The last iteration's loader would otherwise go on answering state_dict()
        # with its own step; closing it also makes its iterator stale (StateError).
        self._close_loader()

    def _read_on(self, *, in_worker: bool) -> None:
        """Start the next iteration at the step the last one in the main process
        reached (what state_dict() says), so a loop broken off and begun again (or
        handed to DataLoader workers) does not replay its first steps. A worker's own
        last iteration does not count: its copy cannot tell the main process where it
        stopped, so every worker starts where the main process's dataset does (a
        forked worker finds the main process's loader, made in another process)."""
        loader = self._loader
        if loader is not None and (not in_worker or loader.made_in != os.getpid()):
            self._start = self._phase = loader.step

    def _arrive(self) -> None:
        """In a DataLoader worker, once per process: note where the main process's
        dataset stood when this copy came (forked or unpickled). Every iteration here
        starts there unless the DataLoader loads a state into it first (torchdata's
        resume), as each iteration of a fresh worker does: a persistent worker must not
        go on from its own last iteration, which the consumer did not follow (after a
        resume, its next iteration began at that worker's own next step: steps 6, 5,
        8, 7, ... from two workers)."""
        pid = os.getpid()
        if self._pid != pid:  # (in the main process, never)
            self._read_on(in_worker=True)
            self._pid = pid
            self._origin = (self._start, self._phase, self.seed)
            self._loaded = False

    def _position(self) -> int:
        """The step ``state_dict()`` names, cheaply: read at every batch through
        :attr:`HeadraceDataLoader.step`."""
        return self._start if self._loader is None else self._loader.step

    def _consumed(self, step: int) -> None:
        """The consumer of this process's iteration, whose batches workers read, has
        reached ``step``: what ``state_dict()`` says and the next iteration starts at."""
        if self._loader is None:
            self._start = self._phase = step

    def _close_loader(self) -> None:
        """End this process's iteration: its read-ahead thread stops, its files close."""
        if self._loader is not None:
            self._loader.close()
            self._loader = None

    def __len__(self) -> int:
        """Batches the next iteration yields: from the step ``state_dict()`` names to
        ``steps`` (``TypeError`` when ``steps`` is None). A stock ``DataLoader`` takes
        its ``len()`` from here."""
        return remaining_steps(self.state_dict()["step"], self.steps)

    def __bool__(self) -> bool:
        return True

    # -- iteration -----------------------------------------------------------------
    def _check_ranks(self) -> None:
        """Refuse to read with the ``(0, 1)`` taken before ``torch.distributed`` was
        initialised: every rank would read the whole global batch, silently. (A spawned
        DataLoader worker has no process group: it goes by the dataset's ranks.)"""
        if self._rank_given or not (dist.is_available() and dist.is_initialized()):
            return
        now = dist_rank_world()
        if now != (self.rank, self.world_size):
            raise ConfigError(
                f"this TorchDataset was made as rank {self.rank} of {self.world_size}, but "
                f"torch.distributed is now initialised as rank {now[0]} of {now[1]}: every "
                f"rank would read the same batches. Make the dataset after "
                f"init_process_group, or pass rank= and world_size= explicitly."
            )

    def __iter__(self) -> Iterator[TensorBatch]:
        if self.pin_memory and get_worker_info() is not None:
            raise ConfigError(
                "TorchDataset(pin_memory=True) pins in the iterating process, and pinned "
                "pages do not survive a DataLoader worker queue; use "
                "DataLoader(pin_memory=True) with num_workers > 0."
            )
        return self._tensors(self.iter_arrays())

    def _tensors(self, arrays: Iterator[Batch]) -> Iterator[TensorBatch]:
        # In a worker, x and y of one storage go into shared memory once, not twice.
        share = get_worker_info() is not None
        for batch in arrays:
            yield to_tensors(
                batch, contiguous=self.contiguous, pin_memory=self.pin_memory, share=share
            )

    def iter_arrays(self) -> Iterator[Batch]:
        """This process's share of the steps as NumPy batches (what ``__iter__`` converts)."""
        info = get_worker_info()
        workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
        self._check_ranks()
        if info is not None:
            self._arrive()
            if not self._loaded:
                self._start, self._phase, self.seed = self._origin
        self._loaded = False
        self._read_on(in_worker=info is not None)
        self._close_loader()  # a new iteration supersedes the last one
        loader = Loader(
            self.source,
            batch_size=self.batch_size,
            seed=self.seed,
            rank=self.rank,
            world_size=self.world_size,
            prefetch=self.prefetch,
            chunk_steps=self.chunk_steps,
            steps=self.steps,
            host_order=self.host_order,
            transform=self.transform,
            step_stride=workers,
            step_offset=(self._phase + worker) % workers,
        )
        loader.step = self._start
        self._loader = loader
        return self._generate(loader)

    def _generate(self, loader: Loader) -> Iterator[Batch]:
        try:
            yield from loader
        finally:
            loader.close()

    def __getstate__(self) -> dict[str, Any]:
        # Checked here too: a spawned worker has no process group to check against.
        self._check_ranks()
        # A worker gets the config and start step, never a running loader.
        self._read_on(in_worker=get_worker_info() is not None)
        state = dict(self.__dict__)
        state["_loader"] = None
        return state


def _is_integer(value: object) -> bool:
    """A Python or NumPy integer, not a bool (``num_workers=True`` is no count)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _start_fork_server(ctx: BaseContext) -> None:
    """Start the fork server now, importing torch and headrace once for all workers.

    Each worker imports the main script again (as ``spawn`` does), and a script
    that uses this module imports torch: 1 s a worker, every iteration, measured.
    Python 3.11's forkserver means to preload ``__main__`` but does not (it looks
    for a ``main_path`` that ``spawn`` no longer sends); with torch already
    imported in the server, the script's import of it is free, and with
    headrace's readers imported there, so is unpickling the source (0.1-0.3 s a
    worker here). Started when the loader is made, not at its first batch, so
    that those imports overlap whatever the script does in between (building
    the model): with 2 s between the two, the first batch came 2.17 s after
    ``iter()`` with the server started by it and 0.09 s with the server started
    at construction (``benchmarks/torch_first_batch.py``, 4 alternations,
    medians, load average 7, same digest); with nothing in between, 1.34 vs
    1.33 s. A later loader, with the server running, 0.093 s from building it
    to its first batch against 0.707 s when workers imported the readers
    themselves. A server already running (an earlier loader's) is used as it is.
    """
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(["__main__", "torch", "headrace._shm_ring", "headrace.formats"])
        forkserver.ensure_running()


_NOT_ALLOWED = (
    "batch_size",
    "batch_sampler",
    "collate_fn",
    "persistent_workers",
    "sampler",
    "shuffle",
)


class HeadraceDataLoader(Closing):
    """Tensors of a :class:`TorchDataset`, counting the consumer's steps; workers optional.

    ``state_dict()`` is the global step the consumer reached (not any
    worker's read-ahead position), so it restores with any number of
    workers: every worker starts at that step. Iterating again continues
    where the consumer stopped.

    ``num_workers=0`` (the default): the dataset's loader reads ahead on
    threads and its batches become tensors here (``torch.from_numpy``).
    ``num_workers=k``: ``k`` processes of headrace's own (not a DataLoader)
    each write whole chunks of ``chunk_steps`` batches (32 by default) into a
    ring of ``prefetch_factor + 1`` (default 4) shared-memory slots, and only
    ``(first step, steps, slot)`` crosses a pipe, once per chunk; the tensors
    here are views of the slot (no copy), laid out as without workers (``x``
    and ``y`` views of one storage; each field contiguous with the dataset's
    ``contiguous=True``). A slot is lent to the consumer until the last
    tensor viewing any batch of its chunk is freed, so tensors stay valid as
    long as they are held; once half a worker's slots are lent, its further
    chunks arrive as copies. ``copy=True`` copies every chunk out of its slot.
    Workers start with ``multiprocessing_context`` ``"forkserver"`` (the
    default) or ``"spawn"``; ``"fork"`` is refused. As with any such
    workers, a script must start them under ``if __name__ == "__main__":``
    and the source must pickle. An error in a worker is
    raised here with the step and worker named; closing the iterator (or
    :meth:`close`, or leaving a ``with`` block) stops the workers.
    ``pin_memory=True`` pins here, in the main process.
    """

    def __init__(
        self,
        dataset: TorchDataset,
        *,
        num_workers: int = 0,
        prefetch_factor: int | None = None,
        multiprocessing_context: str | BaseContext | None = None,
        pin_memory: bool = False,
        copy: bool = False,
        **unsupported: Any,
    ) -> None:
        if not isinstance(dataset, TorchDataset):
            raise ConfigError(
                f"HeadraceDataLoader takes a TorchDataset (got {type(dataset).__name__}); "
                "make one of the source: HeadraceDataLoader(TorchDataset(source, "
                "batch_size=...), num_workers=...)."
            )
        for bad in _NOT_ALLOWED:
            if unsupported.get(bad):
                raise ConfigError(
                    f"HeadraceDataLoader got {bad}={unsupported[bad]!r}: the dataset makes "
                    f"whole batches in plan order, and workers restart at the consumer's step "
                    f"on every iteration, so {bad} is not allowed."
                )
            unsupported.pop(bad, None)
        if unsupported:
            raise ConfigError(
                f"HeadraceDataLoader does not take {sorted(unsupported)}; it takes num_workers, "
                "prefetch_factor, multiprocessing_context, pin_memory and copy."
            )
        if not _is_integer(num_workers) or num_workers < 0:
            raise ConfigError(f"num_workers must be an integer >= 0 (got {num_workers!r}).")
        num_workers = int(num_workers)  # a NumPy integer too, as the Loader takes them
        if prefetch_factor is not None and (
            num_workers == 0 or not _is_integer(prefetch_factor) or prefetch_factor < 1
        ):
            raise ConfigError(
                f"prefetch_factor must be an integer >= 1, and only with num_workers > 0 "
                f"(got {prefetch_factor=}, {num_workers=})."
            )
        self.pin_memory = pin_memory or dataset.pin_memory
        if self.pin_memory and not torch.accelerator.is_available():
            raise ConfigError(
                "pin_memory=True needs an accelerator (torch.accelerator.is_available() is "
                "False); pin only on a machine with a GPU."
            )
        self.dataset = dataset
        self.num_workers = num_workers
        # Chunk slots a worker: one the consumer reads, ``prefetch_factor`` ready or filling.
        self.slots = int(prefetch_factor or 3) + 1
        self.copy = copy
        # Checked now, not at the first batch.
        self.context = mp_context(multiprocessing_context) if num_workers else None
        if multiprocessing_context is None and self.context is not None:
            _start_fork_server(self.context)
        self._workers: WorkerBatches | None = None
        self._generation = 0  # bumped by iter() and load_state_dict(): older iterators stop

    @property
    def step(self) -> int:
        """The next global step the consumer has not received: the dataset's, so a
        dataset moved by anything else (``ds.load_state_dict`` of a checkpoint, its own
        iteration, another loader over it) moves this loader with it (it went on from
        its own count, replaying what the dataset had been moved past)."""
        return self.dataset._position()

    def __len__(self) -> int:
        """Batches the next iteration yields, from ``step`` to the dataset's ``steps``
        (``TypeError`` when that is None). For a scheduler's total (``OneCycleLR``'s
        ``total_steps``), use ``dataset.steps``: after a resume this is what remains."""
        return remaining_steps(self.step, self.dataset.steps)

    def __bool__(self) -> bool:
        return True

    def __iter__(self) -> Iterator[TensorBatch]:
        ds = self.dataset
        ds._check_ranks()
        ds.load_state_dict(ds.state_at(self.step))
        if self.num_workers:
            self.close()  # the last iteration's workers (before the generation is taken)
        self._generation += 1
        generation = (self._generation, ds._loads)
        if not self.num_workers:
            try:
                for batch in ds.iter_arrays():  # the dataset's loader counts the steps
                    yield to_tensors(batch, contiguous=ds.contiguous, pin_memory=self.pin_memory)
                    self._check_current(generation)
            except Exception as exc:
                self._check_current(generation, exc)
                raise
            return
        cfg = RingConfig(
            source=ds.source,
            loader={
                "batch_size": ds.batch_size,
                "seed": ds.seed,
                "rank": ds.rank,
                "world_size": ds.world_size,
                # The ring's slots are the worker's read-ahead: a prefetch thread in the
                # worker as well measured slower (GIL hand-offs in the worker, 49-57 %
                # against 69 % of the bare loader's rate).
                "prefetch": 0,
                "chunk_steps": ds.chunk_steps,
                "chunk_bytes": WORKER_CHUNK_BYTES,
                "steps": ds.steps,
                "host_order": ds.host_order,
                "transform": ds.transform,
            },
            start=self.step,
            workers=self.num_workers,
            slots=self.slots,
            contiguous=ds.contiguous,
        )
        self._workers = workers = WorkerBatches(cfg, copy=self.copy, context=self.context)
        step = cfg.start
        try:
            for batch in workers:  # writeable arrays, plain strides: torch may share them
                step += 1
                ds._consumed(step)  # what self.step, and a new loader over ds, go on from
                # Handed over, not kept in this frame: a suspended (perhaps abandoned)
                # iterator must not hold a slot, and so its ring's mapping, once closed.
                out = [self._from_slot(batch)]
                del batch
                yield out.pop()
                self._check_current(generation)
        except Exception as exc:
            self._check_current(generation, exc)
            raise
        finally:
            workers.close()

    def _from_slot(self, batch: Batch) -> TensorBatch:
        batch = _tensorable(batch)
        if self.pin_memory:
            return {k: torch.from_numpy(a).pin_memory() for k, a in batch.items()}
        return {k: torch.from_numpy(a) for k, a in batch.items()}

    def _check_current(self, generation: tuple[int, int], failed: Exception | None = None) -> None:
        # Checked when the consumer asks for the next batch: a stale iterator would
        # otherwise go on counting its own steps into the restored ``step``. Also when
        # the wait for a batch failed: a close() from another thread (a watchdog) ends
        # the workers or loader the waiting thread reads from, whose own error (a worker
        # "exited", a closed process object, a closed Loader) would mislead.
        if generation != (self._generation, self.dataset._loads):
            raise StateError(
                "this iterator is stale: close(), load_state_dict() or a newer iter() on "
                "its HeadraceDataLoader, or load_state_dict() on its dataset, came after it "
                "began; iterate the loader again (it continues at the consumer's step)"
            ) from failed

    def close(self) -> None:
        """Stop the last iteration: its workers, or without workers its read-ahead
        thread and open files (tensors handed out stay valid). Iterating again
        continues at the consumer's step; the stopped iterator raises StateError."""
        # First: the stopped iterator must not go on into its closed workers' rings.
        self._generation += 1
        if self._workers is not None:
            self._workers.close()
            self._workers = None
        # Where the dataset's iteration stopped (unless another loader's has begun since)
        # stays what it says: a new loader over it continued from where this one began.
        self.dataset._read_on(in_worker=False)
        self.dataset._close_loader()

    def state_dict(self) -> dict[str, Any]:
        """``{"step": next global step the consumer has not received, seed, ...}``."""
        return self.dataset.state_at(self.step)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from the saved step; an iterator already running raises StateError."""
        self.dataset.load_state_dict(state)
        self.close()  # the workers of a running iteration would go on filling their rings
        self._generation += 1
