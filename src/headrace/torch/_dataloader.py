"""``HeadraceDataLoader``: a dataset's tensors, counting the consumer's steps.

:class:`HeadraceDataLoader` ``(num_workers=k)`` runs worker processes of its
own instead of a DataLoader's: each writes whole chunks of batches into a
ring of shared-memory slots and sends only ``(first step, steps, slot)``; the
tensors are views of the slot, lent until the last of them is freed (see
``headrace._shm_ring``).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from multiprocessing import forkserver
from multiprocessing.context import BaseContext
from typing import TYPE_CHECKING, Any

from headrace._closing import Closing
from headrace._shm_ring import RingConfig, WorkerBatches, mp_context
from headrace.errors import ConfigError, StateError
from headrace.io._ranges import whole_number
from headrace.pipeline import Batch
from headrace.pipeline._passes import starts_at
from headrace.torch._batching import no_attribute
from headrace.torch._dataset import TorchDataset
from headrace.torch._fork_server import preload
from headrace.torch._ragged import RaggedTensorBatch
from headrace.torch._tensors import TensorBatch, from_numpy, pinnable, tensorable, to_tensors
from headrace.torch._wrappers import hf_causal_lm, lightning_prefetched, refuse_shifted_twice

__all__ = ["WORKER_CHUNK_BYTES", "HeadraceDataLoader"]

# Most bytes of a chunk in a worker process: a chunk is a ring slot, and each worker has
# prefetch_factor + 1 of them (large batches make chunks of fewer steps).
WORKER_CHUNK_BYTES = 16 << 20


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
    The same whether forkserver is the default or given, by name or as a context
    (given, the server started with ``__main__`` alone: first batch 4.0-9.9 s
    against 2.0-2.7 s). Modules the user asked the server to preload stay asked for.
    """
    if ctx.get_start_method() == "forkserver":
        preload()
        forkserver.ensure_running()


#: A stock DataLoader's arguments that would batch or order the dataset's whole batches,
#: and where that is said instead (each refusal names its fix: a migrating script passes
#: them all).
_NOT_ALLOWED = {
    "batch_size": "the global batch is TorchDataset(batch_size=...), each rank's share "
    "batch_size // world_size rows",
    "batch_sampler": "the plan picks each step's samples; Mixture(sources, weights) mixes sources",
    "collate_fn": "per-sample work goes in TorchDataset(transform=fn), fn(arrays, samples) "
    "on NumPy arrays where the reading happens (in the workers); per-batch work on the "
    "tensors in your loop",
    "sampler": "the plan picks each step's samples; Mixture(sources, weights) mixes sources",
    "shuffle": "the source shuffles already (shuffle=True by default), a new order each "
    "epoch keyed by TorchDataset(seed=...)",
}


#: What a stock DataLoader's other arguments are for, done here (said when one is given).
_INSTEAD = {
    "drop_last": "drop_last: every batch is whole (steps run over epochs); for one exact "
    "pass whose last batch is masked, TorchDataset(..., epochs=1).",
    "generator": "generator: the order is a function of TorchDataset(seed=...) alone.",
    "in_order": "in_order: batches always come in global step order.",
    "pin_memory_device": "pin_memory_device: pin_memory=True pins for torch.accelerator's "
    "current device.",
    "timeout": "timeout: to stop waiting on stuck storage, call close() from another "
    "thread (a watchdog); the waiting iteration then raises StateError.",
    "worker_init_fn": "worker_init_fn: nothing needs seeding (every random choice is keyed "
    "by the seed and step; a transform gets each sample's generator, samples.rngs()); "
    "set up per-process state in the transform, at its first call.",
}


#: Those arguments at a stock DataLoader's defaults, which ask for nothing: taken (a
#: ``**kwargs`` of DataLoader settings moved over was refused for ``drop_last=False``).
_STOCK = {
    "drop_last": False,
    "generator": None,
    "in_order": True,
    "pin_memory_device": "",
    "timeout": 0,
    "worker_init_fn": None,
}


def _stock(key: str, value: object) -> bool:
    default = _STOCK[key]
    if default is None or isinstance(default, bool):
        return value is default
    return type(value) in (type(default), float) and value == default


class HeadraceDataLoader(Closing):
    """Tensors of a :class:`TorchDataset`, counting the consumer's steps; workers optional.

    ``state_dict()`` is the global step the consumer reached (not any
    worker's read-ahead position), so it restores with any number of
    workers: every worker starts at that step. Iterating again continues
    where the consumer stopped; a Lightning evaluation (sanity check, validation,
    test) moves it not: each starts where the loader stood before the last one, so
    every validation over ``steps=`` sees the same batches, as with Lightning's own
    loaders.

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
    ``pin_memory=True`` pins here, in the main process, a pinned copy per
    stretch of memory the fields view (``x`` and ``y`` one), with workers as
    without them; with ``contiguous=True``, a copy per field.

    ``persistent_workers=True`` keeps the worker processes and their rings
    from one iteration to the next: ``iter()`` tells each worker the new start
    (as new workers would get it), and slots of chunks sent for the last
    iteration go back unread. Default ``False``, as a DataLoader's: idle workers
    hold processes and shared memory between iterations, until :meth:`close`.
    """

    #: What a stock DataLoader that does not batch says (each item a whole batch, none
    #: dropped): read by wrappers that rebuild a DataLoader from these attributes
    #: (accelerate's ``skip_first_batches``, the Hugging Face Trainer's fast-forward on
    #: resume), which then meet the dataset's own refusal, naming the setting to change,
    #: instead of failing on a missing attribute.
    batch_size: None = None
    drop_last: bool = False

    def __init__(
        self,
        dataset: TorchDataset,
        *,
        num_workers: int = 0,
        prefetch_factor: int | None = None,
        multiprocessing_context: str | BaseContext | None = None,
        pin_memory: bool = False,
        copy: bool = False,
        persistent_workers: bool = False,
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
                    f"on every iteration, so {bad} is not allowed: {_NOT_ALLOWED[bad]}."
                )
            unsupported.pop(bad, None)
        unsupported = {k: v for k, v in unsupported.items() if not (k in _STOCK and _stock(k, v))}
        if unsupported:
            ways = [_INSTEAD[k] for k in sorted(unsupported) if k in _INSTEAD]
            raise ConfigError(
                f"HeadraceDataLoader does not take {sorted(unsupported)}; it takes num_workers, "
                "prefetch_factor, multiprocessing_context, pin_memory, copy and persistent_workers."
                + "".join(f" {way}" for way in ways)
            )
        if not whole_number(num_workers) or num_workers < 0:
            raise ConfigError(f"num_workers must be an integer >= 0 (got {num_workers!r}).")
        num_workers = int(num_workers)  # a NumPy integer too, as the Loader takes them
        if prefetch_factor is not None and (
            num_workers == 0 or not whole_number(prefetch_factor) or prefetch_factor < 1
        ):
            raise ConfigError(
                f"prefetch_factor must be an integer >= 1, and only with num_workers > 0 "
                f"(got {prefetch_factor=}, {num_workers=})."
            )
        if not isinstance(persistent_workers, bool) or (persistent_workers and not num_workers):
            raise ConfigError(
                f"persistent_workers must be True or False, and True only with num_workers > 0 "
                f"(got {persistent_workers=}, {num_workers=})."
            )
        if multiprocessing_context is not None and not num_workers:
            # As a DataLoader refuses it: accepted, even "bogus" or "fork" passed unchecked.
            raise ConfigError(
                f"multiprocessing_context={multiprocessing_context!r} is how worker "
                "processes start, and num_workers=0 starts none: leave it out, or give "
                "num_workers > 0."
            )
        if not isinstance(multiprocessing_context, str | BaseContext | None):
            raise ConfigError(
                f"multiprocessing_context={multiprocessing_context!r} is no start method: "
                "give 'forkserver' (the default) or 'spawn', by name or as "
                "multiprocessing.get_context(...)."
            )
        if not isinstance(copy, bool):
            raise ConfigError(f"copy must be True or False (got {copy!r}).")
        self.persistent_workers = persistent_workers
        self.pin_memory = dataset.pin_memory or (
            bool(pin_memory) and pinnable("HeadraceDataLoader")
        )
        self.dataset = dataset
        self.num_workers = num_workers
        # Chunk slots a worker: one the consumer reads, ``prefetch_factor`` ready or filling.
        self.slots = int(prefetch_factor or 3) + 1
        self.copy = copy
        # Checked now, not at the first batch.
        self.context = mp_context(multiprocessing_context) if num_workers else None
        if self.context is not None:
            _start_fork_server(self.context)
        self._workers: WorkerBatches | None = None
        self._generation = 0  # bumped by iter() and load_state_dict(): older iterators stop

    @property
    def prefetch_factor(self) -> int | None:
        """Chunks each worker reads ahead (``None`` without workers, as a DataLoader's)."""
        return self.slots - 1 if self.num_workers else None

    @property
    def step(self) -> int:
        """The next global step the consumer has not received: the dataset's, so a
        dataset moved by anything else (``ds.load_state_dict`` of a checkpoint, its own
        iteration, another loader over it) moves this loader with it (it went on from
        its own count, replaying what the dataset had been moved past)."""
        return self.dataset._position()

    def __len__(self) -> int:
        """Batches the next iteration yields, from ``step`` to the dataset's ``steps``
        (``TypeError`` when that is None; after a Lightning evaluation, from where it
        began; asked by a Lightning evaluation of an exact pass, the whole pass:
        ``TorchDataset._length``). For a scheduler's total (``OneCycleLR``'s
        ``total_steps``), use ``dataset.steps``: after a resume this is what remains."""
        return self.dataset._length()

    def __bool__(self) -> bool:
        return True

    def __iter__(self) -> Iterator[TensorBatch | RaggedTensorBatch]:
        # A Lightning evaluation starts where the loader stood before the last one
        # (TorchDataset._by_lightning): every validation over steps= sees the same batches.
        self.dataset._by_lightning(self.load_state_dict)
        # Said at iter(), not at the first next(): Lightning's fit loop makes the iterator
        # of each of max_epochs epochs, and asks an empty one for nothing.
        moved = self.dataset._went  # an iteration left it there, no state loaded since
        self.dataset._going_again("HeadraceDataLoader")
        batches = self._iterate(moved, hf_causal_lm())
        self.dataset._live = weakref.ref(batches)
        return batches

    def _iterate(
        self, moved: bool, hf_model: str | None = None
    ) -> Iterator[TensorBatch | RaggedTensorBatch]:
        """The batches, from the dataset's step; ``hf_model``: the causal LM a Hugging
        Face Trainer gives them to, whose first batch is checked for fields it cannot
        take as headrace gives them (``refuse_shifted_twice``)."""
        ds = self.dataset
        ds._check_ranks()
        # A finished or broken-off exact pass (epochs=) starts over: each evaluation is
        # the whole pass.
        evaluation = ds._evaluation  # (kept: this load is no state of the user's)
        ds.load_state_dict(ds.state_at(starts_at(self.step, ds.steps, ds.epochs, moved)))
        ds._evaluation = evaluation
        if self.num_workers:
            # The last iteration's workers, kept if persistent (before the generation is taken).
            self._stop(keep_workers=self.persistent_workers)
        self._generation += 1
        generation = (self._generation, ds._loads)
        if not self.num_workers:
            try:
                # The dataset's loader counts the steps (a batch lost on its way to
                # tensors not among them).
                for tensors in ds._tensors(ds.iter_arrays(), pin_memory=self.pin_memory):
                    if hf_model is not None:
                        refuse_shifted_twice(tensors, hf_model)
                        hf_model = None
                    yield tensors
                    self._check_current(generation)
            except Exception as exc:
                self._check_current(generation, exc)
                raise
            return
        ds._went = True  # (the load above began this iteration: it was no resume)
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
                **ds.end(),
                "host_order": ds.host_order,
                "transform": ds.transform,
                # Each worker's loader warns on its stderr, naming its reads; the ring
                # warns here, naming the worker (the default was every worker's 60 s).
                "stall_warn_s": ds.stall_warn_s,
            },
            start=self.step,
            origin=ds.origin,
            workers=self.num_workers,
            slots=self.slots,
            contiguous=ds.contiguous,
        )
        workers = self._workers
        if workers is None:
            workers = WorkerBatches(
                cfg, copy=self.copy, context=self.context, persistent=self.persistent_workers
            )
            self._workers = workers
        workers.cfg = cfg  # persistent workers start over here, or new ones start
        step = cfg.start
        failed = True
        try:
            for batch in workers:  # writeable arrays, plain strides: torch may share them
                # Handed over, not kept in this frame: a suspended (perhaps abandoned)
                # iterator must not hold a slot, and so its ring's mapping, once closed.
                out = [self._from_slot(batch)]
                del batch
                if hf_model is not None:
                    refuse_shifted_twice(out[0], hf_model)
                    hf_model = None
                # Counted once its tensors are made (pinning may be interrupted): what
                # self.step, and a new loader over ds, go on from.
                step += 1
                ds._consumed(step)
                try:
                    yield out.pop()
                except GeneratorExit:  # abandoned (a break): persistent workers stay
                    failed = False
                    raise
                self._check_current(generation)
            failed = False
        except Exception as exc:
            self._check_current(generation, exc)
            raise
        finally:
            current = generation == (self._generation, ds._loads)
            if not self.persistent_workers or (failed and current):
                workers.close()
            if current:  # where the consumer stopped, for a stock DataLoader's workers
                ds._post()

    def _from_slot(self, batch: Batch) -> TensorBatch | RaggedTensorBatch:
        if self.dataset.ragged:  # each sample a tensor, pinned one by one
            return self.dataset._as_tensors(batch, pin_memory=self.pin_memory)
        if self.pin_memory and not self.dataset.contiguous:
            # Pinned as without workers, a base at a time: x and y of a token batch view
            # one stretch of the slot, which pinned field by field became two copies.
            return to_tensors(batch, pin_memory=True)
        batch = tensorable(batch)
        if self.pin_memory:
            # Field by field: contiguous fields lie apart in the slot, and pinned as one
            # base they would take the other batches' rows between them along (pack
            # shares up to twice the fields' bytes).
            return {k: from_numpy(a).pin_memory() for k, a in batch.items()}
        return {k: from_numpy(a) for k, a in batch.items()}

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
        """Stop the last iteration: its workers (persistent ones too), or without
        workers its read-ahead thread and open files (tensors handed out stay valid).
        Iterating again continues at the consumer's step; the stopped iterator raises
        StateError."""
        self._stop(keep_workers=False)

    def _stop(self, *, keep_workers: bool) -> None:
        # First: the stopped iterator must not go on into its closed workers' rings.
        self._generation += 1
        if self._workers is not None and not keep_workers:
            self._workers.close()
            self._workers = None
        # Where the dataset's iteration stopped (unless another loader's has begun since)
        # stays what it says: a new loader over it continued from where this one began.
        self.dataset._read_on(in_worker=False)
        self.dataset._close_loader()

    if not TYPE_CHECKING:  # (to mypy, a misspelt attribute stays an error)

        def __getattr__(self, name: str) -> Any:
            raise no_attribute(self, name)

    def state_dict(self) -> dict[str, Any]:
        """``{"step": next global step the consumer has not received, seed, ...}``.

        Under a Lightning fit loop, a batch its fetcher has taken ahead of the training
        step (from a loader without ``len()``) counts as not received."""
        ds = self.dataset
        if ds._before_evaluation() is not None:  # where Lightning's next evaluation starts
            return ds.state_at(ds._next_start())
        # An exact pass a loop has left part way names step 0, where the next iteration
        # starts (TorchDataset._resumes_at).
        return ds.state_at(ds._resumes_at(self.step - lightning_prefetched(self)))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from the saved step; an iterator already running raises StateError."""
        self.dataset.load_state_dict(state)
        # The workers of a running iteration would go on filling their rings (persistent
        # ones only until their slots are full: the next iter() tells them the new start).
        self._stop(keep_workers=self.persistent_workers)
        self._generation += 1
