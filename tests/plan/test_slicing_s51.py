"""A restart on a host count that does not divide the global batch (8 -> 5 nodes of a
batch of 48) is told the host counts that would, beside the batches that would: a
Mixture (and an exact pass) cannot change its batch at a resume, so for them the host
count is the way on. Until 2026-12-07 it said only "use a multiple of 5"."""

from __future__ import annotations

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.formats import TokenSource
from headrace.pipeline import Loader, Mixture
from headrace.plan import host_slice


def test_an_uneven_split_names_the_host_counts_and_batches_that_divide() -> None:
    with pytest.raises(ConfigError) as err:
        host_slice(48, 0, 5)
    message = str(err.value)
    assert "48 does not split evenly over 5 hosts" in message
    assert "4 or 6 hosts" in message, message
    assert "45 or 50" in message, message
    assert "Mixture" in message, message
    with pytest.raises(ConfigError, match="a batch of 7 splits over 1 or 7 hosts"):
        host_slice(7, 0, 5)  # a prime: only 1 below, 7 above


def test_a_mixture_on_a_host_count_that_does_not_divide_is_told_before_any_read(
    tmp_path: object,
) -> None:
    path = f"{tmp_path}/t.bin"
    np.arange(4_000, dtype=np.uint16).tofile(path)
    mix = Mixture([TokenSource(path, context=16, dtype="uint16")], [1.0], batch_size=48)
    with pytest.raises(ConfigError, match="4 or 6 hosts"):
        Loader(mix, batch_size=48, rank=0, world_size=5)
    for rank in range(6):  # and 6 hosts read it
        with Loader(mix, batch_size=48, rank=rank, world_size=6, steps=1, prefetch=0) as ld:
            assert next(iter(ld))["x"].shape == (8, 16)
