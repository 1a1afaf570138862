"""A user's ``collate_fn`` that raises, under a stock DataLoader's workers over a
``TorchDataset`` (session 55).

In a worker the fetcher's ``collate_fn`` is wrapped (``Carrying``, so that a batch's
corrupt-file news reach the main process whatever the collate makes of it). Its raising
path was untested: the user must get their own exception (type, message, the frame of
their collate in the worker's traceback) for the batch it failed on, and, going on with
the iterator, every later batch once, in step order, as torch gives them without the
wrapper.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from torch.utils.data import DataLoader  # noqa: E402

from headrace.formats import TokenSource  # noqa: E402
from headrace.torch import TorchDataset  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")

STEPS = 8


class RefusesOne:
    """A user's collate_fn (module level: spawn workers import it): raises on the batch
    whose ``x`` is ``bad``, gives the others as a tuple."""

    def __init__(self, bad: np.ndarray[Any, Any]) -> None:
        self.bad = bad

    def __call__(self, batch: dict[str, Any]) -> tuple[Any, Any]:
        if np.array_equal(batch["x"].numpy(), self.bad):
            raise_on_the_bad_batch(int(self.bad[0, 0]))
        return batch["x"], batch["y"]


class BadBatchError(ValueError):
    pass


def raise_on_the_bad_batch(first: int) -> None:
    raise BadBatchError(f"user collate refused the batch starting with token {first}")


def _digest(x: Any, y: Any) -> str:
    return hashlib.sha256(x.numpy().tobytes() + y.numpy().tobytes()).hexdigest()


def _dataset(root: Path) -> TorchDataset:
    source = TokenSource(root / "t.bin", dtype="uint16", context=8)
    return TorchDataset(source, batch_size=4, seed=0, steps=STEPS)


@pytest.mark.parametrize(("workers", "context"), [(2, "fork"), (2, "spawn"), (2, "forkserver")])
@pytest.mark.parametrize("bad", [0, 3])
def test_the_user_sees_their_error_and_the_rest_come_once_in_order(
    tmp_path: Path, workers: int, context: str, bad: int
) -> None:
    np.random.default_rng(5).integers(0, 60_000, STEPS * 4 * 8 + 1, dtype=np.uint16).tofile(
        tmp_path / "t.bin"
    )
    want = [_digest(b["x"], b["y"]) for b in DataLoader(_dataset(tmp_path), batch_size=None)]
    assert len(set(want)) == STEPS
    bad_x = next(
        b["x"].numpy()
        for i, b in enumerate(DataLoader(_dataset(tmp_path), batch_size=None))
        if i == bad
    )
    dl = DataLoader(
        _dataset(tmp_path),
        batch_size=None,
        num_workers=workers,
        collate_fn=RefusesOne(bad_x),
        multiprocessing_context=context,
    )
    it = iter(dl)
    got = [_digest(*next(it)) for _ in range(bad)]
    with pytest.raises(BadBatchError) as caught:
        next(it)
    message = str(caught.value)
    assert f"user collate refused the batch starting with token {int(bad_x[0, 0])}" in message
    assert "in raise_on_the_bad_batch" in message  # their frame, in the worker's traceback
    assert "in __call__" in message
    got += [_digest(*b) for b in it]  # going on: the batches after it, once each
    assert got == want[:bad] + want[bad + 1 :]


class RefusesSteps:
    """A user's collate_fn that raises on the batches of the given ``index`` lists."""

    def __init__(self, bad: list[list[int]]) -> None:
        self.bad = bad

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        if sorted(batch["index"].tolist()) in self.bad:
            raise BadBatchError("user collate refused a batch")
        return dict(batch)


def test_corrupt_files_of_a_refused_batch_still_reach_the_main_process(tmp_path: Path) -> None:
    """The batch whose collate raised carried the files replaced for it: they were said
    on the worker's stderr only, and the main process's source never counted them. Its
    worker's next batch carries them now."""
    from _corrupt_npys import write_corrupt_npys

    from headrace.formats import FileSource

    folder = write_corrupt_npys(tmp_path)

    def run(workers: int, collate: Any = None) -> tuple[FileSource, list[list[int]]]:
        src = FileSource(str(folder), format="npy", on_corrupt="replace", max_corrupt=0.1)
        ds = TorchDataset(src, batch_size=8, seed=1, steps=10)
        kw = {} if collate is None else {"collate_fn": collate}
        it = iter(DataLoader(ds, batch_size=None, num_workers=workers, **kw))
        got: list[list[int]] = []
        while True:
            try:
                got.append(sorted(next(it)["index"].tolist()))
            except BadBatchError:
                continue  # the user goes on
            except StopIteration:
                return src, got

    alone, want = run(0)
    assert alone.replaced_samples == 4 and len(alone.corrupt_files) == 2
    # Steps 1 and 3 (each of worker 1's first two batches, with 2 workers) refused.
    src, got = run(2, RefusesSteps([want[1], want[3]]))
    assert got == want[:1] + want[2:3] + want[4:]
    assert src.corrupt_files == alone.corrupt_files
    assert src.replaced_samples == alone.replaced_samples
