"""Edge cases of the loader and mixtures found by a review (session 46)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError, StateError
from headrace.formats import PaddedRows
from headrace.pipeline import Loader, Mixture
from headrace.pipeline._mixture import source_seed


def numbered_rows(root: Path, n: int) -> PaddedRows:
    """``n`` padded rows whose first token is the row's own number: a batch says which
    rows it holds."""
    tokens = np.ones((n, 9), dtype=np.int32)
    tokens[:, 0] = np.arange(n)
    np.save(root / "rows.npy", tokens)
    return PaddedRows(root / "rows.npy", context=8, empty_rows="keep")


@pytest.mark.parametrize("world", [1, 2])
def test_a_pass_over_a_mixture_of_one_source_marks_the_rows_it_read(
    tmp_path: Path, world: int
) -> None:
    # A mixture of one source still deals each step's positions by a permutation, so
    # its local sample at a position is not the global one: marked by the global number,
    # the last step's valid rows held a next-epoch row (counted twice) and left one out.
    n, b = 23, 8
    src = numbered_rows(tmp_path, n)
    seen: Counter[int] = Counter()
    for rank in range(world):
        mix = Mixture({"only": src}, [1.0], batch_size=b)
        with Loader(mix, batch_size=b, rank=rank, world_size=world, epochs=1) as loader:
            for batch in loader:
                ok = batch["valid"]
                seen.update(batch["x"][ok, 0].tolist())
                # Each row's mark is the source's own sample number of what it holds.
                own = src.read(source_seed(loader.seed, 0), batch["sample"])["x"][:, 0]
                assert np.array_equal(own, batch["x"][:, 0])
    assert seen == Counter(range(n))


@pytest.mark.parametrize("step", [0, 5])
def test_a_refusal_of_other_weights_gives_a_way_on_that_works(tmp_path: Path, step: int) -> None:
    # At step 0 it said to add schedule={0: new_weights}, which a Mixture refuses (its
    # switches come at steps > 0): nothing was read yet, so the new weights just start.
    src = numbered_rows(tmp_path, 23)
    with Loader(Mixture({"a": src, "b": src}, [0.7, 0.3], batch_size=8), batch_size=8) as old:
        old.load_state_dict({**old.state_dict(), "step": step})
        saved = old.state_dict()
    with Loader(Mixture({"a": src, "b": src}, [0.5, 0.5], batch_size=8), batch_size=8) as new:
        with pytest.raises(StateError, match="what differs: weights") as err:
            new.load_state_dict(saved)
        said = str(err.value)
        if step:
            assert f"schedule={{{step}: new_weights}}" in said
            Mixture({"a": src, "b": src}, [0.7, 0.3], batch_size=8, schedule={step: [0.5, 0.5]})
        else:
            assert "schedule=" not in said and "step 0" in said
            new.load_state_dict({**new.state_dict(), "step": 0})  # the way on it gives


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("epochs", [2**60, 2**62, 2**63 - 1, 2**64 + 1])
def test_a_pass_past_the_sample_numbers_is_refused(
    tmp_path: Path, mixed: bool, epochs: int
) -> None:
    # epochs * samples wrapped int64: the pass ended at a negative step (no batch), at
    # some small one, or (a mixture) was said to have a source of weight 0.
    src = numbered_rows(tmp_path, 23)
    source = Mixture([src, src], [1, 1], batch_size=8) if mixed else src
    with pytest.raises(ConfigError, match=rf"epochs={epochs} .*23 samples.*2\*\*63 - 1"):
        Loader(source, batch_size=8, epochs=epochs)
    top = ((1 << 63) - 1) // 23
    if not mixed:
        with Loader(source, batch_size=8, epochs=top, prefetch=0) as loader:
            assert loader.steps == -(-top * 23 // 8)
        return
    # Each source's samples fit, but half a batch each, their steps do not: not "weight 0".
    with pytest.raises(ConfigError, match=r"source '0' .*only past sample 2\*\*63 - 1.*fewer"):
        Loader(source, batch_size=8, epochs=top)
    # epoch_steps() said None, "never" (weight 0), for the same count.
    assert isinstance(source, Mixture)
    with pytest.raises(ConfigError, match=rf"epoch_steps\({top}\): source '0' .*2\*\*63 - 1"):
        source.epoch_steps(top)
