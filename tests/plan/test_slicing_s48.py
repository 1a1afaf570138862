"""Host slices and step samples at their edges (session 48)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.plan import host_slice, step_samples


def test_host_slices_tile_every_evenly_split_batch() -> None:
    for batch in range(1, 97):
        for world in (w for w in range(1, batch + 1) if batch % w == 0):
            cuts = [host_slice(batch, r, world) for r in range(world)]
            assert cuts[0][0] == 0 and cuts[-1][1] == batch
            assert all(a[1] == b[0] for a, b in itertools.pairwise(cuts))
            assert {hi - lo for lo, hi in cuts} == {batch // world}
            got = np.concatenate([step_samples(range(2, 4), batch, lo, hi) for lo, hi in cuts])
            want = step_samples(range(2, 4), batch, 0, batch)
            assert np.array_equal(np.sort(got), want)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((10, 0, 4), "does not split evenly over 4 hosts"),
        ((2, 0, 4), "cannot give each of 4 hosts"),
        ((8, 2, 2), r"rank must be in \[0, 2\) \(got 2\)"),
        ((8, -1, 2), r"rank must be in \[0, 2\) \(got -1\)"),
        ((8, 0, 0), r"world_size must be >= 1 \(got 0\)"),
        ((8, 0, -2), r"world_size must be >= 1 \(got -2\)"),
        ((0, 0, 1), "cannot give each of 1 hosts"),
    ],
)
def test_host_slice_refusals_are_config_errors(args: tuple[int, int, int], message: str) -> None:
    # A ValueError, as before (the loader re-raised it as a ConfigError); now one itself,
    # as the bench's kinds, which call it directly, and every other caller gets it.
    with pytest.raises(ConfigError, match=message):
        host_slice(*args)


@pytest.mark.parametrize(
    "args", [(8, 0, 2.0), (8.0, 0, 2), (8, 0.0, 2), (8, 0, True), (8, False, 2), ("8", 0, 2)]
)
def test_host_slice_of_no_integers_is_refused(args: tuple[object, object, object]) -> None:
    # (8, 0, 2.0) gave the slice (0.0, 4.0); (8, 0, True) the whole batch as host 0 of 1.
    with pytest.raises(ConfigError, match="must be an integer"):
        host_slice(*args)  # type: ignore[arg-type]


def test_host_slice_of_numpy_integers_is_python_ints() -> None:
    lo, hi = host_slice(np.int64(8), np.int64(1), np.uint8(2))  # type: ignore[arg-type]
    assert (lo, hi) == (4, 8) and type(lo) is int and type(hi) is int


@pytest.mark.parametrize("steps", [np.array([1.7]), [0.5, 1.0], np.array([True])])
def test_steps_that_are_no_integers_are_refused_not_truncated(steps: object) -> None:
    # Step 1.7 read step 1's samples.
    with pytest.raises(ConfigError, match="steps must be integers"):
        step_samples(steps, 4, 0, 4)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "steps", [[2**63], [2**64 + 3], np.array([2**63], dtype=np.uint64), [1, 2**70]]
)
def test_steps_past_int64_are_out_of_range_not_an_overflow(steps: object) -> None:
    # [2**63] raised OverflowError from NumPy; an np.uint64 2**63 was named step -2**63.
    with pytest.raises(ConfigError, match=r"steps \[\d+, \d+\] with a global batch of 4"):
        step_samples(steps, 4, 0, 4)  # type: ignore[arg-type]
