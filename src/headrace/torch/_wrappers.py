"""Refuse a trainer's wrapper that would hand a :class:`~headrace.torch.TorchDataset`'s
batches out other than as the plan says.

Each rank's dataset already holds only that rank's rows of every global step. Hugging
Face ``accelerate`` (and the ``Trainer``, which prepares its DataLoader with it) wraps a
DataLoader again for several processes, and Lightning restores a checkpoint into the
loaders it can; measured with accelerate 1.16 and Lightning 2.6 on 2 gloo processes:

* ``accelerator.prepare(DataLoader(ds, batch_size=None))``, by default for an
  ``IterableDataset`` (``dispatch_batches``), iterates the loader on rank 0 only, glues
  ``num_processes`` of its batches together and sends rank ``r`` the ``r``-th: rank 1
  got rank 0's rows of the next step, and the other ranks' rows were never read. It
  failed only where gloo cannot send the dtype (``RuntimeError: Invalid scalar type``
  for ``uint32`` tokens); an ``int64`` or ``float32`` field went through.
* With ``dispatch_batches=False`` it wraps the dataset in ``IterableDatasetShard``,
  which keeps every ``num_processes``-th item on each rank (``TypeError`` with
  ``batch_size=None``; a rank's steps dropped with a batch size).
* ``skip_first_batches`` (the Trainer's fast-forward on resume) reads and drops the
  batches already trained on, on top of a loader state that resumes past them (where
  no state was loaded, skipping is the resume, slow but exact: not refused).
* Lightning saves and restores the state of a loader that has ``state_dict`` (a
  :class:`~headrace.torch.HeadraceDataLoader`), not of a stock ``DataLoader``: resumed,
  the dataset started again at step 0 and the run trained on its first steps twice.
* Lightning's fetcher takes one batch ahead of the training step from a loader without
  ``len()`` (``steps=None``), to know whether it is the last: a checkpoint then saved
  the step after the one trained on, and the resumed run skipped a batch
  (:func:`lightning_prefetched` counts it back).

Like the DataLoader checks in ``_batching``, the wrappers are found up the stack of
the caller (``TorchDataset.__iter__``, in a forked worker too; ``__getstate__`` for a
spawned one), by the module and name of their type or of a class it derives from: a
user's subclass of a framework's class (a fit loop of their own in ``trainer.fit_loop``)
is that class, and a user's class of the same name elsewhere is not. If a later release
renamed them, these checks would go quiet, and ``tests/adapters/test_frameworks.py``
(Lightning: ``test_frameworks_lightning.py``) fails.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

from headrace.errors import ConfigError

__all__ = [
    "hf_causal_lm",
    "lightning_evaluation",
    "lightning_prefetched",
    "lightning_resumed",
    "lightning_taken",
    "refuse_shifted_twice",
    "refuse_wrappers",
    "self_of",
]

#: How many callers up to look: accelerate's wrappers and Lightning's fit loop are a
#: dozen or so up from ``TorchDataset.__iter__``, and a forked DataLoader worker's
#: stack holds its parent's frames below its own (found from fork and forkserver
#: workers alike, by hand); generous, since it runs once an iteration.
_DEPTH = 48

#: The packages whose frames are looked into; a frame of any other code (the user's
#: training loop) is passed over unread. Before Python 3.13, reading ``frame.f_locals``
#: copies the frame's locals into a dict the frame keeps until it is read again or
#: returns: read at each ``iter()``, a training function's locals (the last step's
#: output, rebound every step) stayed alive a whole epoch more, measured on 3.11.
_FRAMEWORKS = ("accelerate.", "lightning.", "pytorch_lightning.", "torch.")

_RECIPE = "docs/frameworks.md#trainers-accelerate-lightning-hugging-face-trainer"

_FIT_LOOPS = {
    "lightning.pytorch.loops.fit_loop._FitLoop",
    "pytorch_lightning.loops.fit_loop._FitLoop",
}
_EVALUATION_LOOPS = {
    "lightning.pytorch.loops.evaluation_loop._EvaluationLoop",
    "pytorch_lightning.loops.evaluation_loop._EvaluationLoop",
}


def _kinds(obj: object) -> list[str]:
    """``module.Class`` of ``obj``'s real type and of each class it derives from, most
    derived first (``type()``, not ``isinstance``: accelerate's wrappers answer
    ``__class__`` with the DataLoader they wrap)."""
    return [f"{cls.__module__}.{cls.__qualname__}" for cls in type(obj).__mro__]


def _is_fit_loop(obj: object) -> bool:
    return not _FIT_LOOPS.isdisjoint(_kinds(obj))


def self_of(frame: FrameType, packages: tuple[str, ...] = _FRAMEWORKS) -> object:
    """The ``self`` of a frame of one of ``packages`` (``None`` for any other: its locals
    unread, see :data:`_FRAMEWORKS`)."""
    module = frame.f_globals.get("__name__")
    if not (isinstance(module, str) and module.startswith(packages)):
        return None
    return frame.f_locals.get("self")


def _holds(obj: object, dataset: object) -> bool:
    try:
        return getattr(obj, "dataset", None) is dataset
    except Exception:  # a wrapper's __getattr__ that fails some other way: not ours
        return False


def refuse_wrappers(dataset: Any) -> None:
    """Raise ``ConfigError`` if a caller of the caller wraps ``dataset`` in a way that
    re-splits, drops or replays its batches (see the module's docstring)."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(_DEPTH):
        if frame is None:
            return
        obj = self_of(frame)
        if obj is not None:
            _check(obj, dataset)
        frame = frame.f_back


def _check(obj: object, dataset: Any) -> None:
    kinds = _kinds(obj)
    name = type(dataset).__name__
    wrapper = next((kind for kind in kinds if kind.startswith("accelerate.")), None)
    if wrapper is not None:
        if not _holds(obj, dataset):
            return
        cls = wrapper.rpartition(".")[2]
        skip = getattr(obj, "skip_batches", 0)
        # Without a loaded state the dataset starts at step 0, and skipping is the resume.
        if isinstance(skip, int) and skip > 0 and dataset._loads:
            raise ConfigError(
                f"accelerate's skip_first_batches would read and drop the first {skip} "
                f"batches of this {name}, which resumes from its own state: that many "
                "batches would be skipped twice. Load the saved headrace state into the "
                "loader and do not fast-forward: the Hugging Face Trainer with "
                "TrainingArguments(ignore_data_skip=True), or no skip_first_batches call "
                f"with accelerate ({_RECIPE})."
            )
        state = getattr(obj, "state", None)
        processes = getattr(obj, "num_processes", getattr(state, "num_processes", 1))
        if isinstance(processes, int) and processes > 1:
            how = (
                "iterates it on rank 0 only and sends each rank a slice of rank 0's "
                "batches (dispatch_batches, its default for an IterableDataset): rank r "
                "would get rank 0's rows of another step"
                if cls == "DataLoaderDispatcher"
                else "keeps every num_processes-th batch on each rank "
                "(dispatch_batches=False): each rank would skip steps"
            )
            raise ConfigError(
                f"accelerate's {cls} over {processes} processes {how}, and this {name} "
                f"already holds only rank {dataset.rank}'s rows of each step. Do not "
                "give accelerate the DataLoader: iterate HeadraceDataLoader(ds) on every "
                "rank (accelerator.prepare returns it as it is), move batches to "
                "accelerator.device, and accelerator.register_for_checkpointing(loader); "
                "with the Hugging Face Trainer, override get_train_dataloader to return "
                f"that loader ({_RECIPE})."
            )
        return
    if _is_fit_loop(obj):
        _refuse_lightning_replay(obj, dataset)


def _refuse_lightning_replay(loop: Any, dataset: Any) -> None:
    """A Lightning run resumed from a checkpoint restores no state into a stock
    DataLoader: refuse a dataset over which no state was loaded."""
    trainer = getattr(loop, "trainer", None)
    if getattr(trainer, "training", True) is False:
        # A validation (or sanity-check) loader inside fit: it is meant to start at its
        # first batch every time, and Lightning restores no evaluation loader's state.
        return
    step = getattr(trainer, "global_step", 0)
    ckpt = getattr(trainer, "ckpt_path", None)
    if ckpt is None or not isinstance(step, int) or step <= 0:
        return
    progress = getattr(getattr(loop, "epoch_loop", None), "batch_progress", None)
    if getattr(progress, "is_last_batch", False) is True and dataset.epochs is not None:
        # Resumed at an epoch's end (where Lightning's default ModelCheckpoint saves): the
        # next epoch starts the exact pass over, as the uninterrupted run's did.
        return
    if dataset._loads:  # the user restored a state of their own (on_load_checkpoint)
        return
    raise ConfigError(
        f"Lightning resumed from {ckpt} at global step {step}, but it saves "
        f"and restores no state for a stock DataLoader: this {type(dataset).__name__} "
        "would start again at step 0 and train on its first batches twice. Return "
        "headrace.torch.HeadraceDataLoader(ds) from train_dataloader(): Lightning keeps "
        f"its state_dict() in the checkpoint and restores it ({_RECIPE})."
    )


def lightning_prefetched(loader: object) -> int:
    """Batches of ``loader`` that a Lightning fit loop up the caller's stack has taken
    but not yet given to the training step (0 where there is none)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:  # to the bottom: called once a checkpoint, not a batch
        obj = self_of(frame)
        if obj is not None and _is_fit_loop(obj):
            flat = getattr(getattr(obj, "_combined_loader", None), "flattened", ())
            if not any(it is loader for it in flat):
                return 0
            # Each batch the fetcher holds is one of every loader it combines.
            held = getattr(getattr(obj, "_data_fetcher", None), "batches", None)
            return len(held) if isinstance(held, list) else 0
        frame = frame.f_back
    return 0


def lightning_taken(dataset: object) -> int | None:
    """Batches of a stock DataLoader over ``dataset`` that a Lightning fit loop up the
    caller's stack has given to the training step since the loader's iterator began;
    ``None`` where no fit loop iterates one.

    A stock DataLoader's workers read ahead, and none of the dataset's code runs in the
    main process as its batches arrive: the fit loop's iterator of that loader counts
    the batches it yielded (torch's ``_num_yielded``, reset at each ``iter()``), and
    Lightning's fetcher holds some of them ahead of the training step (one, without
    ``len()``: :func:`lightning_prefetched`)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:  # to the bottom: called once a checkpoint, not a batch
        obj = self_of(frame)
        if obj is not None and _is_fit_loop(obj):
            combined = getattr(obj, "_combined_loader", None)
            flat = getattr(combined, "flattened", ())
            # One iterator a loader, in their order (a training CombinedLoader's modes;
            # a cycled loader's is replaced by its new iter(), counted from 0 again).
            iterators = getattr(getattr(combined, "_iterator", None), "iterators", ())
            if not isinstance(flat, list) or not isinstance(iterators, list):
                return None
            if len(flat) != len(iterators):
                return None
            for loader, iterator in zip(flat, iterators, strict=True):
                if _holds(loader, dataset):
                    taken = getattr(iterator, "_num_yielded", None)
                    if isinstance(taken, int) and not isinstance(taken, bool):
                        held = getattr(getattr(obj, "_data_fetcher", None), "batches", None)
                        return taken - (len(held) if isinstance(held, list) else 0)
            return None
        frame = frame.f_back
    return None


def lightning_resumed(dataset: object) -> int:
    """Batches of the epoch a Lightning fit up the caller's stack resumes part way through
    that its checkpoint had counted, where a stock DataLoader over ``dataset`` is one of
    its training loaders (0 otherwise).

    Lightning adds them to its count of the epoch's batches and ends the epoch at the
    loader's ``len()``, which it takes as the whole epoch's. Lightning restores no state
    into a stock DataLoader, so the dataset's, loaded in the user's
    ``on_load_checkpoint``, is already in its ``len()``: from step 3 of 12, the resumed
    epoch ended after 6 more batches, where the run never interrupted went on for 9. (A
    loader with ``state_dict`` gets its state after Lightning takes its ``len()``.)"""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(_DEPTH):
        if frame is None:
            return 0
        obj = self_of(frame)
        if obj is not None and _is_fit_loop(obj):
            epoch = getattr(obj, "epoch_loop", None)
            if getattr(epoch, "restarting", False) is not True:
                return 0
            flat = getattr(getattr(obj, "_combined_loader", None), "flattened", ())
            if not any(_holds(it, dataset) and not hasattr(it, "state_dict") for it in flat):
                return 0
            progress = getattr(getattr(epoch, "batch_progress", None), "current", None)
            ready = getattr(progress, "ready", 0)
            return ready if isinstance(ready, int) and ready > 0 else 0
        frame = frame.f_back
    return 0


def lightning_evaluation() -> tuple[Any, object] | None:
    """The Lightning trainer whose evaluation loop (a sanity check, validation, test) is
    up the caller's stack, and its stage (``trainer.state.stage``) now; ``None`` where
    there is none."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(_DEPTH):
        if frame is None:
            return None
        obj = self_of(frame)
        if obj is not None and not _EVALUATION_LOOPS.isdisjoint(_kinds(obj)):
            trainer = getattr(obj, "trainer", None)
            state = getattr(trainer, "state", None)
            return None if state is None else (trainer, getattr(state, "stage", None))
        frame = frame.f_back
    return None


def hf_causal_lm() -> str | None:
    """The class name of the model that a Hugging Face ``Trainer`` up the caller's stack
    trains, where the model's loss shifts its labels (a causal LM: the Trainer's own
    ``_loss_shifts_labels``); ``None`` where there is none."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(_DEPTH):
        if frame is None:
            return None
        # transformers.trainer's frames alone: each read copies a frame's locals (see
        # _FRAMEWORKS), and the Trainer iterates the loader in its own module.
        obj = self_of(frame, ("transformers.trainer",))
        if obj is not None and "transformers.trainer.Trainer" in _kinds(obj):
            model = getattr(obj, "model", None)
            if getattr(obj, "_loss_shifts_labels", False) is True or _causal_lm(model):
                return type(model).__name__
            return None
        frame = frame.f_back
    return None


def _causal_lm(model: object) -> bool:
    """Whether ``model`` is (or derives from) a class that transformers' auto classes
    name a causal LM: the Trainer's ``_loss_shifts_labels`` goes by the model's
    ``loss_type``, which ``GPT2LMHeadModel`` (transformers 5.25) does not set."""
    auto = sys.modules.get("transformers.models.auto.modeling_auto")
    names: set[str] = set()
    for value in getattr(auto, "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", {}).values():
        names.update((value,) if isinstance(value, str) else value)
    return not names.isdisjoint(cls.__name__ for cls in type(model).__mro__)


def refuse_shifted_twice(batch: Any, model: str) -> None:
    """Raise ``ConfigError`` if ``batch``, about to be given to the causal LM ``model`` by
    the Hugging Face Trainer (``model(**batch)``), has no ``input_ids`` (headrace's ``x``
    and ``y``: the model's own ``ValueError`` named neither), or has as ``labels`` targets
    shifted already (``labels[:, j] == input_ids[:, j + 1]``, as a token source's ``y``
    renamed): the model shifts its labels again and trains each token on the one after
    next, without a word. ``shift_labels`` in the batch says the labels are meant."""
    fields = sorted(map(str, batch))
    fix = (
        "give the TorchDataset a transform that names them as the model takes them, "
        "y being shifted already: {'input_ids': x as int64, 'labels': y as int64, "
        f"'shift_labels': the same y}} ({_RECIPE})"
    )
    if "input_ids" not in batch and "inputs_embeds" not in batch:
        raise ConfigError(
            f"the Hugging Face Trainer gives each batch's fields to {model}.forward as "
            f"keyword arguments, and this HeadraceDataLoader's batches have {fields}, no "
            f"input_ids: {fix}"
        )
    ids, labels = batch.get("input_ids"), batch.get("labels")
    if "shift_labels" in batch or ids is None or labels is None:
        return
    shape = getattr(ids, "shape", None)
    if shape is None or len(shape) != 2 or shape[1] < 2 or getattr(labels, "shape", 0) != shape:
        return
    after = labels[:, :-1]
    kept = after != -100  # the Trainer's and the model's ignore_index
    if not bool(kept.any()) or not bool((after[kept] == ids[:, 1:][kept]).all()):
        return
    if bool((labels == ids)[labels != -100].all()):
        return  # every token the same as the next: no telling, and no harm
    raise ConfigError(
        f"this HeadraceDataLoader's labels are shifted already (labels[:, j] == "
        f"input_ids[:, j + 1], as a token source's y is), and {model} shifts its labels "
        "again: it would train each token on the one after next. Give the same targets as "
        f"shift_labels as well, which the model then takes as they are; {fix}"
    )
