"""Refuse a DataLoader that batches a :class:`~headrace.torch.TorchDataset`'s batches.

A stock ``DataLoader`` batches by default (``batch_size=1``): its fetcher takes
``batch_size`` items of the dataset and collates them, and an item here is a whole
batch, so every tensor came out with a leading dimension of 1, silently (or two
batches stacked, with ``batch_size=2``).

DataLoader tells its dataset nothing of its batching; the fetcher that calls
``iter(dataset)`` (in the main process or in each worker) holds it, as
``auto_collation`` beside ``dataset``: torch's since 1.2, and torchdata's
``StatefulDataLoader`` uses torch's. If a later torch renamed them, this check would
go quiet (tests/adapters/test_torch_batch_size.py fails) and never refuse a loader
that does not batch. The alternative, a batch type of our own registered in torch's
``default_collate_fn_map``, changes what every user gets: a ``dict`` subclass is a
leaf to ``torch.utils._pytree``, so a ``tree_map`` moving a batch to the device
would stop at the batch; and a ``collate_fn`` of the user's would bypass it.
"""

from __future__ import annotations

import sys

from headrace.errors import ConfigError

__all__ = ["refuse_auto_collation"]

#: How many callers up the fetcher may be: ``iter(dataset)`` is a builtin (no frame),
#: so torch's fetcher is the caller of ``__iter__``; a little slack for a wrapper.
_DEPTH = 4


def refuse_auto_collation(dataset: object) -> None:
    """Raise if the caller of ``dataset.__iter__`` (who calls this) is a DataLoader
    fetcher that batches the dataset's items."""
    frame = sys._getframe(2)
    for _ in range(_DEPTH):
        fetcher = frame.f_locals.get("self")
        if (
            getattr(fetcher, "dataset", None) is dataset
            and getattr(fetcher, "auto_collation", False) is True
        ):
            raise ConfigError(
                f"{type(dataset).__name__} gives whole batches, but the DataLoader "
                "iterating it batches them again (its batch_size is not None; a stock "
                "DataLoader's is 1 by default): every tensor would gain a leading "
                "dimension. Use DataLoader(dataset, batch_size=None, ...), or "
                "headrace.torch.HeadraceDataLoader(dataset, ...)."
            )
        if frame.f_back is None:
            return
        frame = frame.f_back
