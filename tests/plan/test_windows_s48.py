"""Window layouts at their edges (session 48)."""

from __future__ import annotations

import numpy as np
import pytest

from headrace.plan import WindowLayout


@pytest.mark.parametrize(
    ("tokens", "tail"), [((0,), False), ((0, 1, 8), False), ((1, 1), True), ((0,), True)]
)
def test_a_layout_of_files_that_hold_no_sample_is_refused_where_made(
    tokens: tuple[int, ...], tail: bool
) -> None:
    # It was made, and its first locate divided by its 0 samples an epoch (a
    # RuntimeWarning) and then failed deep inside ("a permutation needs n >= 1").
    with pytest.raises(ValueError, match=r"hold no sample of context 8 \(each file needs"):
        WindowLayout(file_tokens=tokens, context=8, window_tokens=33, shuffle=not tail, tail=tail)


def test_a_layout_with_one_sample_locates_it_every_epoch() -> None:
    layout = WindowLayout(file_tokens=(0, 9, 3), context=8, window_tokens=9)
    assert layout.samples_per_epoch == 1
    plan = layout.locate(2**63 - 1, np.array([0, 1, 2**62]))
    assert plan.window.tolist() == [0, 0, 0] and plan.start.tolist() == [0, 0, 0]
    assert plan.epoch.tolist() == [0, 1, 2**62]
