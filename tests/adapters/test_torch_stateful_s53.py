"""A torchdata ``StatefulDataLoader`` state taken part way through an iteration resumes,
in a fresh ``StatefulDataLoader``, on the exact next batch (session 53): checked against
an uninterrupted run's bytes with 0 and 2 workers, persistent or not, for an exact pass
cut in its second iteration (torchdata's second epoch), for a ``steps=None`` stream, and
for a state taken after a resume (a run preempted twice).

(The plain case, ``steps=`` cut in its first iteration, is in ``test_torch.py``.)
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")
sdl = pytest.importorskip("torchdata.stateful_dataloader")

from headrace import torch as ht  # noqa: E402
from headrace.formats import TokenSource  # noqa: E402
from headrace.pipeline import Loader  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning"),
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
]

STREAM = 16  # the stream's batches compared


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pass of 11 batches of 4 windows of 8 tokens, the last one short (2 windows)."""
    path = tmp_path_factory.mktemp("stateful_s53") / "t.bin"
    np.random.default_rng(7).integers(0, 60_000, 42 * 8 + 1, dtype=np.uint16).tofile(path)
    return path


def _source(path: Path) -> TokenSource:
    return TokenSource(path, dtype="uint16", context=8)


def _digests(batches: Any, n: int | None = None) -> list[str]:
    return [batch_digest([{k: v.numpy() for k, v in b.items()}]) for b in islice(batches, n)]


def _loader(tokens: Path, workers: int, persistent: bool, **kw: Any) -> Any:
    ds = ht.TorchDataset(_source(tokens), batch_size=4, seed=5, **kw)
    return sdl.StatefulDataLoader(
        ds, batch_size=None, num_workers=workers, persistent_workers=persistent and workers > 0
    )


@pytest.mark.parametrize(("workers", "persistent"), [(0, False), (2, False), (2, True)])
def test_a_state_taken_part_way_resumes_on_the_next_batch(
    tokens: Path, workers: int, persistent: bool
) -> None:
    with Loader(_source(tokens), batch_size=4, seed=5, epochs=1) as ld:
        exact = [batch_digest([b]) for b in ld]
    with Loader(_source(tokens), batch_size=4, seed=5) as ld:
        stream = [batch_digest([b]) for b in islice(ld, STREAM)]
    assert len(exact) == 11

    # The exact pass: a whole first iteration, then a state 5 batches into the second.
    dl = _loader(tokens, workers, persistent, epochs=1)
    assert _digests(dl) == exact
    it = iter(dl)
    assert _digests(it, 5) == exact[:5]
    state = dl.state_dict()
    del it
    fresh = _loader(tokens, workers, persistent, epochs=1)
    fresh.load_state_dict(state)
    assert _digests(fresh) == exact[5:]

    # The stream (steps=None): a state 3 batches in, resumed; from that resumed loader a
    # state 4 batches further, resumed in another fresh one.
    dl = _loader(tokens, workers, persistent)
    it = iter(dl)
    assert _digests(it, 3) == stream[:3]
    state = dl.state_dict()
    del it
    resumed = _loader(tokens, workers, persistent)
    resumed.load_state_dict(state)
    it = iter(resumed)
    assert _digests(it, 4) == stream[3:7]
    state = resumed.state_dict()
    del it
    again = _loader(tokens, workers, persistent)
    again.load_state_dict(state)
    assert _digests(again, STREAM - 7) == stream[7:]
