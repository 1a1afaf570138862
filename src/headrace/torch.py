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

Progress: with ``num_workers == 0`` the dataset itself knows the consumer's
step (``state_dict()``). With workers, each worker reads ahead of the
consumer, so the step the *consumer* reached is counted by
:class:`HeadraceDataLoader` (any worker count on resume) or by torchdata's
``StatefulDataLoader``, which calls the dataset's ``state_dict`` inside each
worker (resume with the same worker count, as StatefulDataLoader requires).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from numpy.typing import NDArray
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from headrace.errors import ConfigError, StateError
from headrace.pipeline import Loader, Source
from headrace.plan import LoaderState, fingerprint_digest

__all__ = ["HeadraceDataLoader", "TorchDataset", "dist_rank_world", "to_tensors"]

TensorBatch = dict[str, torch.Tensor]


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


def _root(a: NDArray[Any]) -> NDArray[Any]:
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    return root


def _as_view(a: NDArray[Any], base: torch.Tensor, root: NDArray[Any]) -> torch.Tensor | None:
    """``a`` as a view of ``base`` (the tensor of ``root``), or None where strides do not fit."""
    isz = a.itemsize
    offset = a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    if a.dtype != root.dtype or offset % isz or any(s % isz for s in a.strides):
        return None
    strides = tuple(s // isz for s in a.strides)
    return base.as_strided(a.shape, strides, storage_offset=offset // isz)


def to_tensors(
    batch: dict[str, NDArray[Any]], *, contiguous: bool = False, pin_memory: bool = False
) -> TensorBatch:
    """Tensors sharing memory with the arrays (``torch.from_numpy``); views stay views.

    Arrays that view one small common array (``x``/``y`` of a token batch)
    become views of *one* tensor, so a worker queue moves one storage into
    shared memory, not one per view. A root array more than twice the size
    of its views (a whole window, say) is not shared: each view becomes its
    own tensor then. A read-only array is copied first: torch would otherwise
    share memory it must not write (and warn about it).
    """
    if contiguous:
        batch = {k: np.ascontiguousarray(a) for k, a in batch.items()}
    roots: dict[int, tuple[NDArray[Any], int]] = {}
    for a in batch.values():
        r = _root(a)
        roots[id(r)] = (r, roots.get(id(r), (r, 0))[1] + a.nbytes)
    bases: dict[int, torch.Tensor] = {}
    views: dict[str, tuple[int, torch.Tensor]] = {}  # name -> (root id, view of its base)
    out: TensorBatch = {}
    for name, a in batch.items():
        r, used = roots[id(_root(a))]
        shareable = a.flags.writeable and r.flags.c_contiguous and r.nbytes <= 2 * used
        if r is not a and shareable:
            base = bases.get(id(r))
            if base is None:
                base = bases[id(r)] = torch.from_numpy(r)
            t = _as_view(a, base, r)
            if t is not None:
                views[name] = (id(r), t)
                out[name] = t
                continue
        out[name] = torch.from_numpy(a if a.flags.writeable else a.copy())
    if pin_memory:
        # Pinning copies a storage: pin each shared base once and view it again.
        pinned = {k: b.pin_memory() for k, b in bases.items()}
        for name, t in out.items():
            if name in views:
                k, v = views[name]
                out[name] = pinned[k].as_strided(v.shape, v.stride(), v.storage_offset())
            else:
                out[name] = t.pin_memory()
    return out


class TorchDataset(IterableDataset[TensorBatch]):
    """This host's slice of every global batch, as tensors, split over DataLoader workers.

    Use with ``DataLoader(ds, batch_size=None, num_workers=k)``: batching is
    done here, a whole batch per step. ``rank``/``world_size`` default to
    ``torch.distributed``'s when it is initialised (create the dataset after
    ``init_process_group``), else ``0``/``1``. ``prefetch`` and
    ``chunk_steps`` are each worker's :class:`~headrace.pipeline.Loader`
    read-ahead. ``pin_memory`` pins in the process that iterates, so it is
    only for ``num_workers=0``: pinned pages do not survive a worker queue
    (pass ``pin_memory=True`` to the DataLoader instead).
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
        chunk_steps: int = 8,
    ) -> None:
        super().__init__()
        self.rank, self.world_size = dist_rank_world(rank, world_size)
        if pin_memory and not torch.accelerator.is_available():
            raise ConfigError(
                "pin_memory=True needs an accelerator (torch.accelerator.is_available() is "
                "False); pin only on a machine with a GPU."
            )
        # A throwaway loader checks the config now, in the main process, not in a worker.
        Loader(
            source,
            batch_size=batch_size,
            seed=seed,
            rank=self.rank,
            world_size=self.world_size,
            prefetch=prefetch,
            chunk_steps=chunk_steps,
            steps=steps,
        )
        self.source = source
        self.batch_size = batch_size
        self.seed = seed
        self.steps = steps
        self.pin_memory = pin_memory
        self.contiguous = contiguous
        self.prefetch = prefetch
        self.chunk_steps = chunk_steps
        self.fingerprint = fingerprint_digest(source.fingerprint())
        self._start = 0  # the step the next iteration starts at
        self._phase = 0  # worker w owns steps t with (t - phase) % k == w
        self._loader: Loader | None = None  # this process's live worker loader

    # -- state -------------------------------------------------------------------
    def state_at(self, step: int) -> dict[str, Any]:
        """The state that resumes every worker at global ``step`` (for stock DataLoaders)."""
        return LoaderState(
            seed=self.seed, step=step, batch_size=self.batch_size, fingerprint=self.fingerprint
        ).to_dict()

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
        st.check(fingerprint=self.fingerprint, batch_size=self.batch_size)
        phase = state.get("phase", st.step)
        if not isinstance(phase, int) or phase < 0:
            raise StateError(f"loader state has phase {phase!r}; expected an integer >= 0")
        self._start, self._phase, self.seed = st.step, phase, st.seed

    # -- iteration -----------------------------------------------------------------
    def __iter__(self) -> Iterator[TensorBatch]:
        info = get_worker_info()
        workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
        if self.pin_memory and info is not None:
            raise ConfigError(
                "TorchDataset(pin_memory=True) pins in the iterating process, and pinned "
                "pages do not survive a DataLoader worker queue; use "
                "DataLoader(pin_memory=True) with num_workers > 0."
            )
        if self._loader is not None:  # a new iteration supersedes the last one
            self._loader.close()
        loader = Loader(
            self.source,
            batch_size=self.batch_size,
            seed=self.seed,
            rank=self.rank,
            world_size=self.world_size,
            prefetch=self.prefetch,
            chunk_steps=self.chunk_steps,
            steps=self.steps,
            step_stride=workers,
            step_offset=(self._phase + worker) % workers,
        )
        loader.step = self._start
        self._loader = loader
        return self._generate(loader)

    def _generate(self, loader: Loader) -> Iterator[TensorBatch]:
        try:
            for batch in loader:
                yield to_tensors(batch, contiguous=self.contiguous, pin_memory=self.pin_memory)
        finally:
            loader.close()

    def __getstate__(self) -> dict[str, Any]:
        # A worker gets the config and start step, never a running loader.
        state = dict(self.__dict__)
        state["_loader"] = None
        return state


class HeadraceDataLoader:
    """A stock ``DataLoader`` over a :class:`TorchDataset` that counts the consumer's steps.

    ``state_dict()`` is the global step the consumer reached (not any
    worker's read-ahead position), so it restores with any number of
    workers: every worker starts at that step. Iterating again continues
    where the consumer stopped. Other keyword arguments go to ``DataLoader``
    (``num_workers``, ``pin_memory``, ``prefetch_factor``, ...).
    """

    def __init__(self, dataset: TorchDataset, **dataloader_kwargs: Any) -> None:
        for bad in ("batch_size", "sampler", "batch_sampler", "shuffle", "persistent_workers"):
            if dataloader_kwargs.get(bad):
                raise ConfigError(
                    f"HeadraceDataLoader got {bad}={dataloader_kwargs[bad]!r}: the dataset makes "
                    f"whole batches in plan order, and workers restart at the consumer's step "
                    f"on every iteration, so {bad} is not allowed."
                )
        dataloader_kwargs.pop("batch_size", None)
        self.dataset = dataset
        self.dataloader: DataLoader[TensorBatch] = DataLoader(
            dataset, batch_size=None, **dataloader_kwargs
        )
        self.step = dataset.state_dict()["step"]

    def __iter__(self) -> Iterator[TensorBatch]:
        self.dataset.load_state_dict(self.dataset.state_at(self.step))
        for batch in self.dataloader:
            self.step += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        """``{"step": next global step the consumer has not received, seed, ...}``."""
        return self.dataset.state_at(self.step)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dataset.load_state_dict(state)
        self.step = self.dataset.state_dict()["step"]
