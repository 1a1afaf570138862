"""Edges of the mixture plan's public calls: what is no weight list, no source id, or no
sample count it can number is refused by name, not answered or crashed on."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.plan import MixturePlan, quantize_weights


@pytest.mark.parametrize("bad", [None, 3, 2.5])
def test_weights_that_are_no_list_are_refused_by_name(bad: Any) -> None:
    # quantize_weights(None) was "'NoneType' object is not iterable", and a schedule
    # step of MixturePlan given None or a number the same TypeError, naming no step.
    with pytest.raises(ValueError, match=r"weights must be a non-empty list of numbers \(got "):
        quantize_weights(bad)
    with pytest.raises(ValueError, match=r"schedule step 5: weights must be a non-empty list"):
        MixturePlan([1, 1], 8, schedule={5: bad})


def test_decimal_weights_are_numbers() -> None:
    # Decimal is no numbers.Real: [Decimal("0.3"), Decimal("0.7")] (json.loads with
    # parse_float=Decimal) was refused as "weights must be numbers".
    assert quantize_weights([Decimal("0.3"), Decimal("0.7")]) == quantize_weights([0.3, 0.7])
    for bad in (Decimal("NaN"), Decimal("sNaN"), Decimal("-Infinity")):
        with pytest.raises(ValueError, match=r"finite and >= 0"):
            quantize_weights([bad, 1])


@pytest.mark.parametrize("source", [2, -1, 10**20])
def test_a_source_id_out_of_range_is_refused_not_answered(source: int) -> None:
    # cumulative_of(2, n) of two sources gave a count (of no source), and -1 the last's.
    plan = MixturePlan([1, 3], 8)
    with pytest.raises(ConfigError, match=r"source ids must be in \[0, 2\) \(got "):
        plan.cumulative_of(source, 40)
    with pytest.raises(ConfigError, match=r"source ids must be in \[0, 2\)"):
        plan.cumulative_of(np.array([0, 1, source]), 40)
    assert plan.cumulative_of(np.array([0, 1]), 40).tolist() == plan.cumulative(40).tolist()


@pytest.mark.parametrize("n", [2**63, 10**30, -(2**63) - 1])
def test_a_count_beyond_int64_is_refused_by_name(n: int) -> None:
    # cumulative(2**63) was "OverflowError: Python int too large to convert to C long".
    plan = MixturePlan([1, 3], 8, schedule={2: [1, 1]})
    with pytest.raises(ConfigError, match=r"mixture sample counts must be in \[0, 2\*\*63\)"):
        plan.cumulative(n)
    with pytest.raises(ConfigError, match=r"mixture sample counts must be in \[0, 2\*\*63\)"):
        plan.cumulative_of(0, n)
    assert plan.cumulative(2**63 - 1).sum() == 2**63 - 1


def test_counts_are_a_running_sum_of_the_steps_to_the_sample() -> None:
    # The closed form against a plain running sum over 100,000 steps, a schedule and a
    # source that enters at weight 0 included: no drift, no step that takes one back.
    b, steps = 7, 100_000
    plan = MixturePlan(
        np.array([0.5, 1e-4, 0.0, 3.0], dtype=np.float32), b, schedule={50_000: [1, 1, 1e-3, 0]}
    )
    counts = plan.step_counts(np.arange(steps))
    assert (counts >= 0).all() and (counts.sum(axis=1) == b).all()
    assert (counts[:50_000, 2] == 0).all() and (counts[50_000:, 3] == 0).all()
    t = np.arange(0, steps + 1, 997)
    run = np.concatenate([np.zeros((1, 4), np.int64), np.cumsum(counts, axis=0)])
    np.testing.assert_array_equal(plan.cumulative(t * b), run[t])
    np.testing.assert_array_equal(plan.cumulative_of(np.arange(4), steps * b), run[-1])


def test_an_array_of_fractions_is_weights_as_a_list_of_them_is() -> None:
    # np.array([Fraction(1, 3), ...]) is of dtype object: "weights must be numbers".
    thirds = [Fraction(1, 3), Fraction(2, 3)]
    assert quantize_weights(np.array(thirds, dtype=object)) == quantize_weights(thirds)
    with pytest.raises(ValueError, match=r"weights must be numbers \(got '1' in "):
        quantize_weights(np.array(["1", 2], dtype=object))


def test_first_steps_past_step_2_62_are_found_not_wrapped() -> None:
    # Halving took (lo + hi) // 2, which wraps int64 once both pass 2**62 (steps of one
    # sample): "mixture sample counts must be >= 0 (got -2305843009213693953)".
    plan = MixturePlan([1, 1], 1)
    want = np.array([2**62 - 5, 3], dtype=np.int64)
    first = plan.first_steps(want)
    assert (plan.cumulative_of(np.arange(2), first) >= want).all()
    assert (plan.cumulative_of(np.arange(2), first - 1) < want).all()
    assert plan.first_steps([2**62 + 2, 0]).tolist() == [-1, 0]  # past 2**63 - 1 samples
