"""``TorchDataset``: an ``IterableDataset`` whose DataLoader workers each produce whole batches
(how the steps are shared out: :mod:`headrace.torch`).

Progress: with ``num_workers == 0`` the dataset itself knows the consumer's
step (``state_dict()``). With workers, each worker reads ahead of the
consumer, so the step the *consumer* reached is counted by
:class:`~headrace.torch.HeadraceDataLoader` (any worker count on resume) or by
torchdata's ``StatefulDataLoader``, which calls the dataset's ``state_dict``
inside each worker (resume with the same worker count, as StatefulDataLoader
requires).
"""

from __future__ import annotations

import multiprocessing
import os
import weakref
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.context import get_spawning_popen
from multiprocessing.reduction import ForkingPickler
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from headrace._warn import warn_user
from headrace.errors import ConfigError, StateError
from headrace.formats._file_source import relay_corrupt, say_corrupt_news, take_corrupt_news
from headrace.pipeline import DEFAULT_CHUNK_STEPS, Batch, Loader, Source, Transform
from headrace.pipeline._loader_args import launched
from headrace.pipeline._passes import starts_at
from headrace.pipeline._stall import DEFAULT_STALL_WARN_S
from headrace.pipeline._steps import remaining_steps, run_over
from headrace.plan import LoaderState
from headrace.torch._batching import (
    carry_news,
    no_attribute,
    refuse_auto_collation,
    refuse_out_of_order,
    repeated,
)
from headrace.torch._dist import dist_rank_world
from headrace.torch._fork_server import preload_if_forking
from headrace.torch._lifeline import Lifeline
from headrace.torch._mailbox import Mailbox, Relayed
from headrace.torch._ragged import RaggedTensorBatch, check_ragged, ragged_tensors
from headrace.torch._tensors import TensorBatch, pinnable, to_tensors
from headrace.torch._wrappers import (
    lightning_evaluation,
    lightning_resumed,
    lightning_taken,
    refuse_wrappers,
)

__all__ = ["TorchDataset"]


class TorchDataset(IterableDataset[TensorBatch | RaggedTensorBatch]):
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

    ``ragged`` names fields to give as ``list[torch.Tensor]``, one tensor per
    sample (``torch.from_numpy`` of each, no copy), in every batch: images of
    several sizes, a variable number of boxes per image. ``<key>_shape`` comes
    beside each as an ``int64`` tensor ``(B, ndim)``, in every batch too. A field
    of samples of several shapes not named there is refused, naming it.

    ``epochs=k`` (instead of ``steps``) is the loader's exact pass, for
    evaluation: every batch carries ``valid`` (bool) and ``sample`` (int64)
    tensors, and the rows past the pass that fill the last step are marked
    ``valid == False``.

    ``stall_warn_s`` is each worker's loader's: a worker whose batch waits that long
    on storage warns on its stderr, naming the reads in flight (docs/io.md, "Stalled
    storage"). Under :class:`HeadraceDataLoader` ``(num_workers=k)`` the main process
    warns too, naming the step and the worker it waits for; under a stock DataLoader
    it waits on torch's queue and says nothing itself.
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
        ragged: Iterable[str] | None = (),
        epochs: int | None = None,
        stall_warn_s: float | None = DEFAULT_STALL_WARN_S,
    ) -> None:
        super().__init__()
        self.ragged = check_ragged(ragged)
        self.rank, self.world_size = dist_rank_world(rank, world_size)
        self._rank_given = rank is not None
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
            epochs=epochs,
            stall_warn_s=stall_warn_s,
        )
        self.source = source
        # As the loader checked them: Python ints (it takes NumPy integers too), so
        # the state stays JSON-able.
        self.batch_size = check.batch_size
        self.seed = check.seed
        self.steps = check.steps  # an exact pass's end, with epochs
        self.epochs = check.epochs
        self.stall_warn_s = check.stall_warn_s
        # Refused in DataLoader workers as asked, on a machine that pins or not: a script
        # run on a laptop (warned: nothing pinned) failed on the GPU host.
        self._pin_asked = bool(pin_memory)
        self.pin_memory = self._pin_asked and pinnable("TorchDataset")
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
        # Where this batch size took over after a resume with another (Loader.origin).
        self.origin: tuple[int, int] | None = None
        self._loader: Loader | None = None  # this process's live worker loader
        # The process this copy serves: another one is a DataLoader worker's copy (forked
        # or unpickled), which notes where the main process's dataset stood (_arrive).
        self._pid = os.getpid()
        self._came: tuple[int, int, int, tuple[int, int] | None] = (
            self._start,
            self._phase,
            self.seed,
            self.origin,
        )
        self._loaded = False  # a state loaded here since the last iteration began
        # Where the main process's dataset stands, for its persistent DataLoader workers.
        self._mailbox = Mailbox()
        # Ends a stock DataLoader's spawn or forkserver workers when this process dies.
        self._lifeline = Lifeline()
        self._fresh = False  # a worker's copy whose first iteration has not begun
        self._loads = 0  # states loaded in all: an iteration over it began before one is stale
        self._went = False  # iterated in this process since it was made or a state loaded
        # The main process's last iteration of it (its own, or a HeadraceDataLoader's),
        # while its iterator lives (:meth:`_resumes_at`).
        self._live: weakref.ref[Any] | None = None
        # The Lightning evaluation whose loop began the main process's last iteration (its
        # trainer, the stage, and where the dataset stood before: its step, and whether an
        # iteration had moved it), while it may matter (:meth:`_by_lightning`).
        self._evaluation: tuple[weakref.ref[Any], object, int, bool] | None = None
        # A spawn or forkserver worker's copy, pickled for an iteration that a Lightning
        # evaluation began: its stage (:meth:`_evaluation_stage`).
        self._evaluating: str | None = None
        self._iterations = 0  # begun in this DataLoader worker (a persistent one's count)

    # -- state -------------------------------------------------------------------
    def state_at(self, step: int) -> dict[str, Any]:
        """The state that resumes every worker at global ``step`` (for stock DataLoaders)."""
        state = LoaderState(
            seed=self.seed,
            step=step,
            batch_size=self.batch_size,
            fingerprint=self.fingerprint,
            parts=self._parts,
            origin=self.origin,
            epochs=self.epochs,
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
        :class:`HeadraceDataLoader` instead. After a Lightning evaluation, where the
        next one starts (:meth:`_by_lightning`).
        """
        if get_worker_info() is None and self._before_evaluation() is not None:
            start = self._next_start()
            return {**self.state_at(start), "phase": start}
        if self._loader is None:
            if get_worker_info() is None and self._mailbox.worked():
                # A Lightning fit's training loader: its iterator counts what it gave.
                taken = lightning_taken(self)
                if taken is not None:
                    # From where the iteration the loop takes from began (an epoch after
                    # a resumed one: not at the loaded step, Mailbox.spent); none taken
                    # yet (its workers may not have begun), where the next one starts.
                    began = self._mailbox.worked_from() if taken else self._next_start()
                    step = began + taken
                    return {**self.state_at(step), "phase": step}
                # The checkpoint it went into resumed there: a preempted job trained on
                # every batch since that iteration began again, without a word.
                raise StateError(
                    "TorchDataset.state_dict() in the main process while a DataLoader's "
                    f"workers read it: their iteration began at step {self._start}, and "
                    "they read ahead of your loop, so this process cannot tell the step "
                    "your loop reached; a checkpoint of this state would resume at step "
                    f"{self._start} and train on the batches since again. Save "
                    "ds.state_at(step) with your own count of the batches taken (from the "
                    "step the iteration began at), or iterate with "
                    "headrace.torch.HeadraceDataLoader (dl.state_dict()) or torchdata's "
                    "StatefulDataLoader (its state_dict()) "
                    "(docs/frameworks.md#resuming-which-state-to-save)"
                )
            start = self._resumes_at(self._start)
            return {**self.state_at(start), "phase": self._phase if start == self._start else 0}
        loader = self._loader
        state = loader.state_dict()  # (step 0 for an exact pass a loop left part way)
        # An iteration of every step (in the main process) shares out none: its phase is
        # its step, or workers resumed from it share out the steps from where it began
        # (with 2 of them, worker 0's first step came after worker 1's: 6, 5, 8, 7, ...).
        over = state["step"] != loader.step
        phase = self._phase if loader.step_stride > 1 and not over else state["step"]
        return {**state, "phase": phase}

    def _resumes_at(self, step: int) -> int:
        """``step``, or where the next iteration starts once a loop in the main process has
        left an exact pass part way (its iterator gone, no state loaded since): step 0, as
        the Loader's state says (:meth:`~headrace.pipeline.Loader.state_dict`)."""
        live = self._live is not None and self._live() is not None
        if live or get_worker_info() is not None:
            return step
        # (A stock DataLoader's workers start an exact pass over once a Lightning
        # validation has gone through it: :meth:`_evaluated`.)
        return starts_at(step, self.steps, self.epochs, self._moved())

    def _moved(self) -> bool:
        """In the main process: whether an iteration has gone over the dataset since it
        was made or a state was loaded (its own; a stock DataLoader's workers, over a
        loaded state, :meth:`Mailbox.spent`; a Lightning validation's, :meth:`_evaluated`):
        an exact pass then starts over."""
        box = self._mailbox
        return self._went or box.evaluations_moved() or box.load_spent()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Start the next iteration (every worker of it) at the saved step (saved with
        another global batch size: at the first sample not read, as a Loader does)."""
        st = LoaderState.from_dict(state)
        st.check(
            fingerprint=self.fingerprint,
            batch_size=self.batch_size,
            parts=self._parts,
            legacy=self._legacy,
            mixture=self._mixture,
            epochs=self.epochs,
        )
        phase = state.get("phase", st.step)
        if isinstance(phase, bool) or not isinstance(phase, int | np.integer) or phase < 0:
            raise StateError(f"loader state has phase {phase!r}; expected an integer >= 0")
        # Only a DataLoader worker's copy shares out the steps by phase (torchdata restores
        # each worker's own state there); the main process's next iteration starts at the
        # step, whose workers share out the steps from it. (States saved iterating in the
        # main process named the phase that iteration began at.)
        phase = int(phase) if get_worker_info() is not None else st.step
        self._arrive()  # first: a copy that has just come (whatever a loader sets up first)
        self._start, self._phase, self.seed = st.step, phase, st.seed
        self.origin = st.origin_for(self.batch_size)
        self._loaded = True
        self._loads += 1
        self._went = False  # a resume (at the run's end, too), not a loop gone round
        self._evaluation = None  # a sanity check before it is not undone over it
        # The last iteration's loader would otherwise go on answering state_dict()
        # with its own step; closing it also makes its iterator stale (StateError).
        self._close_loader()
        self._post(loaded=True)

    def _post(self, *, loaded: bool = False) -> None:
        """In the main process: tell persistent DataLoader workers already running that
        their next iteration starts where this dataset now stands, as new workers would
        (they went on from where it stood when they started; see ``_mailbox``);
        ``loaded``: only the next one, a state loaded (:meth:`Mailbox.spent`)."""
        self._mailbox.post((self._start, self._phase, self.seed, self.origin), loaded=loaded)

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
            self._came = (self._start, self._phase, self.seed, self.origin)
            self._loaded = False
            self._fresh = True
            self._iterations = 0

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
        return self._length()

    def _length(self) -> int:
        """``len()`` of this dataset and of its loaders: from where the next iteration
        starts, or asked by a Lightning evaluation loop of an exact pass, the whole pass.
        Lightning asks once a fit, before its first evaluation, and stops every later one
        there: an exact pass resumed at step 2 of 5 validated 3 batches each time, where
        the run never interrupted validated all 5 (once over, each starts at step 0)."""
        if self.epochs is not None and lightning_evaluation() is not None:
            return remaining_steps(0, self.steps)
        # A Lightning fit resumed part way through an epoch, over a stock DataLoader,
        # counts that epoch's batches before the checkpoint as done (lightning_resumed):
        # those of this pass before its next start, none where the pass starts over (a
        # checkpoint at an epoch's end: Lightning's 12 done and a new pass's 12 made a
        # resumed epoch of 24 batches, and its LR schedule twice as long).
        start = self._next_start()
        done = start if lightning_resumed(self) else 0
        return remaining_steps(start, self.steps) + done

    def __bool__(self) -> bool:
        return True

    # -- iteration -----------------------------------------------------------------
    def _going_again(self, who: str) -> None:
        """Warn a main process's loop gone round over a run that is over (the Loader's
        warning: each iteration here makes a new Loader, which cannot tell); note that
        this one has begun."""
        if self._went and self.epochs is None and self.steps is not None:
            if self._position() >= self.steps:
                warn_user(run_over(who, self._position(), self.steps), RuntimeWarning, varies=True)
        self._went = True

    def _check_ranks(self) -> None:
        """Refuse to read with the ``(0, 1)`` taken before ``torch.distributed`` was
        initialised: every rank would read the whole global batch, silently. (A spawned
        DataLoader worker has no process group: it goes by the dataset's ranks.) Warn
        where there is still none but a launcher started this process as one of several."""
        if self._rank_given:
            return
        if not (dist.is_available() and dist.is_initialized()):
            # Made as one of several (the group since destroyed): it reads that rank's slice.
            alone = get_worker_info() is None and self.world_size == 1
            found = launched() if alone else None
            if found is not None:
                names, count, variables = found
                warn_user(
                    f"TorchDataset: no rank or world_size given and torch.distributed is not "
                    f"initialised, so this process reads the whole global batch as host 0 of "
                    f"1, but its launcher ({names}) started it as one of {count} "
                    f"({variables}): every rank would read the same rows. Call "
                    "init_process_group before iterating, or pass rank= and world_size= "
                    "(world_size=1 to read the whole batch here on purpose)."
                )
            return
        now = dist_rank_world()
        if now != (self.rank, self.world_size):
            raise ConfigError(
                f"this TorchDataset was made as rank {self.rank} of {self.world_size}, but "
                f"torch.distributed is now initialised as rank {now[0]} of {now[1]}: every "
                f"rank would read the same batches. Make the dataset after "
                f"init_process_group, or pass rank= and world_size= explicitly."
            )

    def __iter__(self) -> Iterator[TensorBatch | RaggedTensorBatch]:
        refuse_wrappers(self)  # first: a trainer's wrapper batching it says more than a DataLoader
        refuse_auto_collation(self)
        if get_worker_info() is not None:
            refuse_out_of_order(self)  # (a forked worker: spawned ones were checked below)
        if self._pin_asked and get_worker_info() is not None:
            raise ConfigError(
                "TorchDataset(pin_memory=True) pins in the iterating process, and pinned "
                "pages do not survive a DataLoader worker queue; use "
                "DataLoader(pin_memory=True) with num_workers > 0."
            )
        if get_worker_info() is None:  # (a worker's copy starts where this one stands)
            self._by_lightning(self.load_state_dict)
        # A worker's corrupt news go with its batches, through the DataLoader's collate_fn.
        through = carry_news(self) if get_worker_info() is not None else ""
        batches = self._tensors(self.iter_arrays(), through=through)
        if get_worker_info() is None:
            self._live = weakref.ref(batches)
        return batches

    def _by_lightning(self, load: Callable[[dict[str, Any]], None]) -> None:
        """Note the Lightning evaluation the main process's iteration is for, if any (a
        :class:`HeadraceDataLoader`'s, or a stock DataLoader's without workers); once the
        last one is over, first put the dataset back where it stood before that one,
        through ``load`` (the loader's ``load_state_dict``, which stops its workers too).

        Lightning makes a new iterator for each evaluation, and its own loaders start
        each at their first batch; it keeps the last one's iterator until then. A val
        loader over ``steps=`` went on from where the last validation stopped: the
        first validation took its batches and the next ones got none ("this iteration
        yields nothing"); over ``steps=None``, each validation got the stream's next
        batches. A sanity check throws its batches away: after one of
        ``num_sanity_val_steps=2``, an exact pass's state named step 2 (a state saved
        mid-training and loaded outside Lightning left out its first 2 batches), and a
        ``steps=`` loader's first validation began there. (A stock DataLoader's workers
        start where this dataset stands, which its evaluations move not.)"""
        found = lightning_evaluation()
        last = self._evaluation
        if (
            found is not None
            and last is not None
            and last[0]() is found[0]
            and last[1] == found[1]
            and self._position() == last[2]
        ):
            # That evaluation's iter() again, no batch taken since (Lightning checks that
            # the loader iterates before its fetcher iterates it; a later evaluation of
            # the same stage finds the loader moved): the first iterator, which took
            # nothing, moved nothing (an exact pass whose state was loaded at step 1
            # began the sanity check at step 0).
            self._went = last[3]
            return
        before = self._before_evaluation()
        if before is not None and before != (self._position(), self._went):
            step, went = before
            load(self.state_at(step))
            self._went = went
        if found is None:
            self._evaluation = None
            return
        trainer, stage = found
        self._evaluation = (weakref.ref(trainer), stage, self._position(), self._went)

    def _before_evaluation(self) -> tuple[int, bool] | None:
        """Where the dataset stood before the Lightning evaluation that began the main
        process's last iteration: its step, and whether an iteration had moved it (after a
        sanity check, as it was; after any other evaluation, one had: an exact pass starts
        over)."""
        if self._evaluation is None:
            return None
        _, stage, step, went = self._evaluation
        return step, went or getattr(stage, "value", None) != "sanity_check"

    def _next_start(self) -> int:
        """The step the next iteration starts at: where the last Lightning evaluation
        began, if one began the last iteration (Lightning asks each evaluation's
        ``len()`` before its ``iter()``), else the consumer's step (0 for an exact pass
        over or left part way)."""
        went = self._went or self._mailbox.load_spent()  # (a stock DataLoader's workers)
        step, went = self._before_evaluation() or (self._position(), went)
        return starts_at(step, self.steps, self.epochs, went)

    def _in_evaluation(self) -> bool:
        """In a stock DataLoader's worker: whether its iterations serve a Lightning
        evaluation, which starts where the last one began by design (Lightning's own
        loaders do)."""
        return self._evaluation_stage() is not None

    def _evaluation_stage(self) -> str | None:
        """In a stock DataLoader's worker: the stage of the Lightning evaluation its
        iterations serve (``"sanity_check"``, ``"validate"``, ...), ``None`` where none
        does. Found up the stack of a forked worker (it holds the frames of the main
        process's ``iter()`` that started it, and a copy of the trainer as it was then),
        or noted when the copy was pickled for a spawn or forkserver worker
        (:meth:`__getstate__`): for a persistent worker, the stage of its first iteration."""
        found = lightning_evaluation()
        if found is None:
            return self._evaluating
        return str(getattr(found[1], "value", ""))

    def _evaluated(self, info: Any) -> bool:
        """In a stock DataLoader's worker beginning an iteration of a Lightning evaluation
        over an exact pass: whether it starts the pass over, as the main process's own
        iterations do (:meth:`_by_lightning`): once an evaluation other than a sanity
        check has begun since the state was loaded. Each validation's workers are fresh
        copies of the dataset, which the main process never iterates: every validation
        began at a loaded step, where the run never interrupted began each at step 0."""
        # The same number in each worker of one iteration, and another in the next (with a
        # persistent worker's count of iterations).
        iteration = _iteration_number(info, self._iterations)
        # A persistent worker's later iteration is no sanity check (its stage is its first's).
        sanity = self._iterations == 1 and self._evaluation_stage() == "sanity_check"
        return self._mailbox.evaluated(iteration, sanity=sanity)

    def _tensors(
        self, arrays: Iterator[Batch], pin_memory: bool | None = None, through: str = ""
    ) -> Iterator[TensorBatch | RaggedTensorBatch]:
        """``arrays`` (:meth:`iter_arrays`) as tensors, pinned if ``pin_memory`` (``None``:
        the dataset's own setting); in a worker, carrying its corrupt news (``through``:
        what to name if they are lost, :func:`carry_news`)."""
        pin = self.pin_memory if pin_memory is None else pin_memory
        # In a worker, x and y of one storage go into shared memory once, not twice.
        share = get_worker_info() is not None
        if share:  # (before its first read) its corrupt files go with its batches
            relay_corrupt()
        loader = self._loader  # made by iter_arrays(), before this generator runs
        try:
            while True:
                at = None if loader is None else loader.step  # the step of the next batch
                batch = next(arrays, None)
                if batch is None:
                    return
                try:
                    out = self._as_tensors(batch, pin_memory=pin, share=share)
                except BaseException:
                    # The loader counts a step read once it hands the batch over; this one
                    # never reached the caller (Ctrl-C while pinning, out of memory), so a
                    # state saved now must resume at it, not after it (as JaxLoader does).
                    if loader is not None and at is not None:
                        loader.step = at
                    raise
                news = take_corrupt_news() if share else None
                yield Relayed(out, news, through) if news else out
        finally:
            if share:  # no batch left to carry them (a failed or abandoned iteration)
                say_corrupt_news(take_corrupt_news())

    def _as_tensors(
        self, batch: Batch, *, pin_memory: bool = False, share: bool = False
    ) -> TensorBatch | RaggedTensorBatch:
        """One NumPy batch as this dataset gives it: tensors, ``ragged`` fields as lists."""
        if self.ragged:
            return ragged_tensors(
                batch, self.ragged, contiguous=self.contiguous, pin_memory=pin_memory, share=share
            )
        return to_tensors(batch, contiguous=self.contiguous, pin_memory=pin_memory, share=share)

    def iter_arrays(self) -> Iterator[Batch]:
        """This process's share of the steps as NumPy batches (what ``__iter__`` converts)."""
        info = get_worker_info()
        workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
        self._check_ranks()
        given = False  # a state given to this worker (torchdata's resume)
        if info is not None:
            self._arrive()
            given = self._loaded
            # A persistent worker's later iteration starts where the main process's
            # dataset now stands (its first, where the copy came from: a state posted
            # between fork and its first iteration reaches every worker at the next).
            news = None if self._fresh else self._mailbox.news()
            self._fresh = False
            if news is not None:
                self._came = news
            if not self._loaded:
                self._start, self._phase, self.seed, self.origin = self._came
            self._iterations += 1
        self._loaded = False
        self._read_on(in_worker=info is not None)
        # Where this process's last iteration left it (no state loaded since): a pass
        # broken off starts over. A worker starts where the main process's dataset stands.
        moved = info is None and self._went
        # A Lightning evaluation's workers (each starts where the dataset stands) leave
        # the main process's state_dict() its own answer: where the next one starts.
        evaluating = info is not None and self._in_evaluation()
        if evaluating and not given and self.epochs is not None:
            moved = self._evaluated(info)
        elif info is not None and not given and not evaluating:
            # A state loaded in the main process starts the first iteration after it; each
            # later one (a Lightning fit's next epoch) starts where an iteration over it
            # left the dataset, as without workers: every epoch after one resumed at step
            # 6 of 12 began at step 6 too (each epoch's workers are fresh copies of a main
            # process's dataset that no iteration there ever moved on from the load).
            moved = self._mailbox.spent(_iteration_number(info, self._iterations))
        if info is None:
            self._going_again("TorchDataset")
        if starts_at(self._start, self.steps, self.epochs, moved) != self._start:
            self._start = self._phase = 0  # a finished exact pass starts over
        self._close_loader()  # a new iteration supersedes the last one
        loader = Loader(
            self.source,
            batch_size=self.batch_size,
            seed=self.seed,
            rank=self.rank,
            world_size=self.world_size,
            prefetch=self.prefetch,
            chunk_steps=self.chunk_steps,
            **self.end(),
            host_order=self.host_order,
            transform=self.transform,
            step_stride=workers,
            step_offset=(self._phase + worker) % workers,
            stall_warn_s=self.stall_warn_s,
        )
        loader.step, loader.origin = self._start, self.origin
        self._loader = loader
        # Worker 0 of a stock DataLoader's workers watches for an epoch loop given the
        # last iteration's batches again (an exact pass is the same pass by design).
        again = info is not None and info.id == 0 and not given and self.epochs is None
        # (Each Lightning evaluation's workers giving the same batches is no repeat.)
        again = again and not evaluating
        return self._generate(loader, watch=again, worker=info is not None and not evaluating)

    def end(self) -> dict[str, Any]:
        """Where each worker's loader ends: ``epochs`` (an exact pass, its batches
        marked) or ``steps``."""
        if self.epochs is not None:
            return {"epochs": self.epochs}
        return {"steps": self.steps}

    def _generate(
        self, loader: Loader, *, watch: bool = False, worker: bool = False
    ) -> Iterator[Batch]:
        try:
            batches = iter(loader)
            if worker:  # (a worker's iteration: its first batch, then the rest)
                start = loader.step
                first = next(batches, None)
                if first is None:
                    return
                self._mailbox.working(start)  # the main process's state_dict() now refuses
                if watch and self._mailbox.again(start):
                    warn_user(repeated(start), RuntimeWarning, varies=True)
                yield first
            yield from batches
        except StateError as exc:
            if loader is self._loader:
                raise
            # Superseded: the Loader's own words ("the loader is closed: make a new one")
            # would send the user to rebuild a dataset that reads on from its step.
            raise StateError(
                "this TorchDataset iterator is stale: a newer iter() of the dataset (or of a "
                "loader over it), load_state_dict() or a HeadraceDataLoader's close() came "
                "after it began, so its next step would not follow the dataset's state; "
                "iterate the dataset again (for batch in ds): it goes on at the step "
                "ds.state_dict() names"
            ) from exc
        finally:
            loader.close()
            if loader is self._loader:  # where this iteration stopped (a worker's: no post)
                self._mailbox.post((loader.step, loader.step, self.seed, self.origin))

    if not TYPE_CHECKING:  # (to mypy, a misspelt attribute stays an error)

        def __getattr__(self, name: str) -> Any:
            raise no_attribute(self, name)

    def __getstate__(self) -> dict[str, Any]:
        # Checked here too: a spawned worker has no process group to check against.
        self._check_ranks()
        refuse_out_of_order(self)  # pickled for a spawned worker, by the loader starting it
        refuse_wrappers(self)
        # A stock DataLoader's forkserver worker: its server, not yet started, imports torch.
        preload_if_forking()
        if get_spawning_popen() is not None:  # a worker's start (spawn, forkserver)
            self._check_pickles()
        # A worker gets the config and start step, never a running loader.
        self._read_on(in_worker=get_worker_info() is not None)
        state = dict(self.__dict__)
        state["_loader"] = state["_live"] = state["_evaluation"] = None  # (a weakref)
        if get_spawning_popen() is not None:  # a worker's start, inside the loader's iter()
            found = lightning_evaluation()
            state["_evaluating"] = None if found is None else str(getattr(found[1], "value", ""))
        if get_spawning_popen() is None:  # a copy (pickle, copy.copy): another dataset
            state["_mailbox"] = Mailbox()
        return state

    def _check_pickles(self) -> None:
        """Name the transform or source that a DataLoader's worker cannot take (pickle's
        own error, out of torch's worker start, named no fix), as HeadraceDataLoader does."""
        for what, value in (("transform", self.transform), ("source", self.source)):
            try:
                ForkingPickler.dumps(value)  # as the worker's start pickles it
            except Exception as exc:
                raise ConfigError(
                    f"TorchDataset's {what} {value!r:.200} does not pickle "
                    f"({type(exc).__name__}: {exc}); a DataLoader's spawn or forkserver "
                    "workers need it picklable (a module-level function or class, not a "
                    "lambda or a local function), or use num_workers=0."
                ) from exc


def _iteration_number(info: Any, iterations: int) -> int:
    """In a DataLoader worker: a number for its iteration, the same in each worker of it
    and another in the next (``iterations``: begun in this worker, a persistent one's
    count)."""
    return _iteration_started(info) * 1_000_003 + iterations


def _iteration_started(info: Any) -> int:
    """In a DataLoader worker: the number multiprocessing gave the first of the workers
    of its iterator (started one by one, by id), the same in each of them and larger at
    each iterator. Read from the worker's name, ``ForkProcess-N1:...:Nk`` (its parent's
    Nk-th child: ``Process.name``'s documented default, public where the number itself is
    not), less its id. Not the iterator's seed, each worker's less its id, but where the
    name is one of another form: Lightning puts the random state back after its sanity
    check, and the first validation's seed was the sanity check's."""
    number = multiprocessing.current_process().name.rpartition("-")[2].rpartition(":")[2]
    try:
        return int(number) - int(info.id)
    except ValueError:
        return int(info.seed) - int(info.id)
