"""Permutations at the edges of their sizes (session 48)."""

from __future__ import annotations

import numpy as np
import pytest

from headrace.plan import Permutation, derive_keys


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 13, 31, 97, 65_521, 65_537])
@pytest.mark.parametrize("seed", [0, 2**32, 2**63 - 1])
def test_small_and_prime_sizes_are_bijections_with_inverse(n: int, seed: int) -> None:
    perm = Permutation(n, derive_keys(seed, n))
    image = perm(np.arange(n))
    assert np.array_equal(np.sort(image), np.arange(n))
    assert np.array_equal(perm.inverse(image), np.arange(n))
    assert [perm.one(i) for i in range(min(n, 40))] == image[:40].tolist()


@pytest.mark.parametrize("n", [2**32 + 1, 2**62 + 3, 2**63])
def test_a_sample_of_a_huge_permutation_maps_into_range_one_to_one(n: int) -> None:
    perm = Permutation(n, derive_keys(11))
    rng = np.random.default_rng(n % 1000)
    idx = np.unique(np.concatenate([rng.integers(0, n - 1, 4000, endpoint=True), [0, n - 1]]))
    image = perm(idx)
    assert image.min() >= 0 and image.max() < n
    assert np.unique(image).size == idx.size  # distinct places, distinct images
    assert np.array_equal(perm.inverse(image), idx)
    assert [perm.one(int(i)) for i in idx[:20]] == image[:20].tolist()
    assert perm._table is None  # a lookup never builds a table of 2**32 places


@pytest.mark.parametrize("n", [2**63 + 1, 2**64 - 1, 2**70])
def test_a_permutation_past_int64_places_is_refused(n: int) -> None:
    # Its images are int64: one of 2**63 + 1 places or more gave images of 2**63 and
    # above as negative numbers (or, for 2**64 and more, broke deep inside NumPy).
    with pytest.raises(ValueError, match=r"n in \[1, 2\*\*63\]"):
        Permutation(n, derive_keys(1))


@pytest.mark.parametrize("n", [5.5, 5.0, "5", True])
def test_a_size_that_is_no_integer_is_refused_not_truncated(n: object) -> None:
    with pytest.raises((TypeError, ValueError), match="permutation needs"):
        Permutation(n, derive_keys(1))  # type: ignore[arg-type]


def test_a_numpy_integer_size_is_taken() -> None:
    a = Permutation(np.int64(1000), derive_keys(4))  # type: ignore[arg-type]
    b = Permutation(1000, derive_keys(4))
    assert type(a.n) is int
    assert np.array_equal(a(np.arange(1000)), b(np.arange(1000)))
