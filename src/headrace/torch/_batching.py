"""Refuse a DataLoader that batches a :class:`~headrace.torch.TorchDataset`'s batches,
or hands them out of order.

A stock ``DataLoader`` batches by default (``batch_size=1``): its fetcher takes
``batch_size`` items of the dataset and collates them, and an item here is a whole
batch, so every tensor came out with a leading dimension of 1, silently (or two
batches stacked, with ``batch_size=2``).

DataLoader tells its dataset nothing of its batching; the fetcher that calls
``iter(dataset)`` (in the main process or in each worker) holds it, as
``auto_collation`` beside ``dataset``: torch's since 1.2, and torchdata's
``StatefulDataLoader`` uses torch's. Its ``dataset`` may be torch's ``ChainDataset`` of
ours (one run after another), which batched them again unrefused until 2026-12-07.
If a later torch renamed them, this check would go quiet
(tests/adapters/test_torch_batch_size.py fails) and never refuse a loader that does
not batch. The alternative, a batch type of our own registered in torch's
``default_collate_fn_map``, changes what every user gets: a ``dict`` subclass is a
leaf to ``torch.utils._pytree``, so a ``tree_map`` moving a batch to the device
would stop at the batch; and a ``collate_fn`` of the user's would bypass it.

``in_order=False`` (torch 2.6's DataLoader, torchdata's ``StatefulDataLoader``) hands
out whichever worker's batch is ready first: the global steps came out in the order
the workers' timing gave (two workers, one slower: steps 1, 3, 5, ..., 0, 2, 4),
another order each run, silently. Its workers are not told of it; the loader is
found up the stack instead: in a forked worker, the parent's frames that started it
are still there (``DataLoader.__iter__`` down to the worker loop); with ``spawn`` or
``forkserver`` the dataset is pickled in the main process, inside that same call.
"""

from __future__ import annotations

import sys

from torch.utils.data import ChainDataset

from headrace.errors import ConfigError
from headrace.torch._mailbox import Carrying
from headrace.torch._wrappers import self_of

__all__ = ["carry_news", "refuse_auto_collation", "refuse_out_of_order"]

#: How many callers up the loader's iterator may be (torch 2.13, torchdata 0.11: the 9th
#: from the fetcher in a forked worker, the 7th from ``__getstate__`` with ``spawn``).
_LOADER_DEPTH = 24

#: Where the DataLoaders and their fetcher live: only these frames' locals are read (the
#: user's training loop, up the stack too, would keep a copy of its own: see
#: ``_wrappers._FRAMEWORKS``).
_LOADERS = ("torch.", "torchdata.")

#: How many callers up the fetcher may be: ``iter(dataset)`` is a builtin (no frame),
#: so torch's fetcher is the caller of ``__iter__``; a little slack for a wrapper.
_DEPTH = 4


def _serves(outer: object, dataset: object) -> bool:
    """Whether a DataLoader over ``outer`` iterates ``dataset``: ``outer`` is it, or a
    torch ``ChainDataset`` of it (one run after another), at any depth; a chain of
    datasets given as a generator is not looked into (that would use it up)."""
    if outer is dataset:
        return True
    inner = getattr(outer, "datasets", None) if isinstance(outer, ChainDataset) else None
    return isinstance(inner, list | tuple) and any(_serves(d, dataset) for d in inner)


def refuse_auto_collation(dataset: object) -> None:
    """Raise if the caller of ``dataset.__iter__`` (who calls this) is a DataLoader
    fetcher that batches the dataset's items."""
    frame = sys._getframe(2)
    for _ in range(_DEPTH):
        obj = self_of(frame, _LOADERS)
        if _serves(getattr(obj, "dataset", None), dataset) and (
            getattr(obj, "auto_collation", False) is True
        ):
            raise ConfigError(
                f"{type(dataset).__name__} gives whole batches, but the DataLoader "
                "iterating it batches them again (its batch_size is not None; a stock "
                "DataLoader's is 1 by default): every tensor would gain a leading "
                "dimension. Use DataLoader(dataset, batch_size=None, ...), or "
                "headrace.torch.HeadraceDataLoader(dataset, ...) (the Hugging Face Trainer, "
                "which batches its train_dataset by per_device_train_batch_size: return "
                "that loader from an overridden get_train_dataloader; "
                "docs/frameworks.md#trainers-accelerate-lightning-hugging-face-trainer)."
            )
        if frame.f_back is None:
            return
        frame = frame.f_back


def carry_news(dataset: object) -> str:
    """In a DataLoader worker, called by ``dataset.__iter__``: wrap the ``collate_fn`` of
    the fetcher iterating ``dataset`` so that the corrupt news its batches carry go on
    with whatever that makes of them (:class:`~headrace.torch._mailbox.Carrying`: a
    user's ``collate_fn`` dropped them). Returns ``""``, or, where the fetcher iterates
    something else over ``dataset`` (a dataset of the user's, whose code may take the
    batches apart first) or none is found, what to name if the news are lost."""
    frame = sys._getframe(2)
    for _ in range(_DEPTH):
        obj = self_of(frame, _LOADERS)
        outer = getattr(obj, "dataset", None)
        collate = getattr(obj, "collate_fn", None)
        if outer is not None and callable(collate):
            if not _serves(outer, dataset):
                return f"the {type(outer).__name__} that the DataLoader iterates"
            if not isinstance(collate, Carrying):  # (a chain's datasets share the fetcher)
                obj.collate_fn = Carrying(collate)  # type: ignore[attr-defined]
            return ""
        if frame.f_back is None:
            break
        frame = frame.f_back
    return ""


def refuse_out_of_order(dataset: object) -> None:
    """Raise if a DataLoader up the stack of the caller (``dataset.__iter__`` in a forked
    worker, ``dataset.__getstate__`` when a worker is started) hands ``dataset``'s
    batches out of order: ``in_order=False`` with more than one worker."""
    frame = sys._getframe(2)
    for _ in range(_LOADER_DEPTH):
        loader = self_of(frame, _LOADERS)
        # A DataLoader (dataset, in_order, num_workers) or its iterator (_dataset, ...).
        for prefix in ("", "_"):
            if (
                _serves(getattr(loader, f"{prefix}dataset", None), dataset)
                and getattr(loader, f"{prefix}in_order", True) is False
                and getattr(loader, f"{prefix}num_workers", 0) > 1
            ):
                raise ConfigError(
                    f"{type(dataset).__name__} gives the global steps in order only to a "
                    "DataLoader that keeps its workers' order, and this one has "
                    "in_order=False: its batches would come in the order its workers "
                    "finish them, another order each run, and a saved state would not "
                    "say which steps were read. Leave in_order at True (headrace reads "
                    "ahead in every worker, so a slow batch does not hold up the others "
                    "for long), or use headrace.torch.HeadraceDataLoader(dataset, "
                    "num_workers=...)."
                )
        if frame.f_back is None:
            return
        frame = frame.f_back


def repeated(step: int) -> str:
    """The warning of a stock DataLoader's workers starting an iteration again where the
    last one began: the batches the consumer was given, again, in the same order."""
    return (
        f"TorchDataset: this DataLoader iteration starts at step {step} again, where the "
        "last one began, so its workers give the same batches again in the same order: a "
        "stock DataLoader's workers cannot tell the dataset where the consumer stopped "
        "(without workers the loop goes on from there, and a run that is over yields "
        "nothing). For several epochs give steps=epochs * steps_per_epoch and loop once; "
        "to go on where a loop stopped use HeadraceDataLoader(ds, num_workers=k), or "
        "ds.load_state_dict(ds.state_at(step)) before iter() (as a deliberate repeat "
        "does, without this warning)."
    )


def no_attribute(obj: object, name: str) -> AttributeError:
    """The ``AttributeError`` of a missing attribute; for ``set_epoch`` (what
    DistributedSampler users call each epoch) it says why there is none. Still an
    ``AttributeError``: accelerate and the Hugging Face Trainer call ``set_epoch`` where
    ``hasattr`` finds one, and must skip it here."""
    kind = type(obj).__name__
    if name == "set_epoch":
        return AttributeError(
            f"{kind} has no set_epoch: each epoch's order is keyed by (seed, epoch) "
            "already and the epoch follows from the step, so nothing needs telling. "
            "Give steps=epochs * steps_per_epoch and loop once (a batch's epoch is "
            "dl.step // steps_per_epoch); epochs=1 for an exact evaluation pass.",
            name=name,
            obj=obj,
        )
    return AttributeError(f"{kind!r} object has no attribute {name!r}", name=name, obj=obj)
