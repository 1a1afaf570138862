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
worker (resume with the same worker count, as StatefulDataLoader requires; with
another, through :func:`from_stateful_dataloader`).
"""

from __future__ import annotations

from headrace._messages import framework_missing

# Here, before any submodule: they import torch unguarded, and the first import of
# headrace.torch (whichever name is asked for) runs this package first.
try:
    import torch
except ModuleNotFoundError as exc:
    if exc.name != "torch":  # one of an installed torch's own dependencies: its error says which
        raise
    raise framework_missing("headrace.torch", "torch") from exc

# The oldest torch this works with is 2.6: torch.accelerator (which pin_memory=True asks)
# came in 2.6, tensors of NumPy's uint16/uint32 (token dtypes) in 2.3. An older one
# failed only at its first pinned or uint16 batch, with torch's own error; asked by the
# feature, not the version string, so that a 2.6 pre-release or local build passes.
if not hasattr(torch, "accelerator"):
    raise ImportError(
        f"headrace.torch needs torch >= 2.6 (found torch {torch.__version__}): "
        "pip install 'headrace[torch]' (or torch >= 2.6 built for your accelerator, from "
        "torch's install guide)",
        name="torch",
    )

from headrace._pack import Packed, pack, unpack
from headrace.torch._dataloader import WORKER_CHUNK_BYTES, HeadraceDataLoader
from headrace.torch._dataset import TorchDataset
from headrace.torch._dcp import DCPStateful
from headrace.torch._dist import dist_rank_world
from headrace.torch._ragged import RaggedTensorBatch as RaggedTensorBatch
from headrace.torch._stateful import from_stateful_dataloader
from headrace.torch._tensors import TensorBatch as TensorBatch
from headrace.torch._tensors import tensors_of, to_tensors

__all__ = [
    "DCPStateful",
    "HeadraceDataLoader",
    "Packed",
    "TorchDataset",
    "WORKER_CHUNK_BYTES",
    "dist_rank_world",
    "from_stateful_dataloader",
    "pack",
    "tensors_of",
    "to_tensors",
    "unpack",
]
