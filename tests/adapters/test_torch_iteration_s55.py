"""The number a stock DataLoader's workers of one iteration share (session 55).

A Lightning evaluation over an exact pass starts over once a validation has gone
through it, and each of a stock DataLoader's workers decides so on its own
(``TorchDataset._evaluated``): the first worker of an iteration notes the answer under
that iteration's number, and its other workers give the same. The number came from
multiprocessing's private ``_identity``; it now comes from the worker's public
``Process.name``. What it must do: be the same in each worker of one iterator, and
differ at the next, with every start method (the iterator's seed did not: Lightning
puts the random state back after its sanity check).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from torch.utils.data import DataLoader, IterableDataset, get_worker_info  # noqa: E402

from headrace.torch._dataset import _iteration_started  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")


class Numbers(IterableDataset[int]):
    """Each worker's iteration number (module level: spawn workers import it)."""

    def __iter__(self) -> Iterator[int]:
        yield _iteration_started(get_worker_info())


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_one_number_an_iterator_and_another_at_the_next(context: str) -> None:
    torch.manual_seed(0)
    dl = DataLoader(Numbers(), batch_size=None, num_workers=2, multiprocessing_context=context)
    first = list(dl)
    torch.manual_seed(0)  # (as Lightning puts it back: the same seeds again)
    second = list(dl)
    assert len(first) == len(second) == 2
    assert first[0] == first[1] and second[0] == second[1], (first, second)
    assert second[0] != first[0]
