"""Fields of a batch that make no global array, refused naming the field (session 48)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is an optional extra (pip install jax jaxlib)")

from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from headrace.errors import ConfigError, DataError  # noqa: E402
from headrace.jax import make_global_batch  # noqa: E402

try:  # as test_jax.py: several CPU devices (only before jax's backend starts)
    jax.config.update("jax_num_cpu_devices", 4)
except RuntimeError:
    pass


def batch_sharding() -> Any:
    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    return NamedSharding(mesh, P("data"))


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        ([[1, 2], [3]] * 4, r"sample 0 is a list: \[1, 2\]; make each sample an array"),
        ([np.zeros(3), np.zeros(4)] * 4, r"samples of different shapes"),
        ([np.zeros((2, 3)), np.zeros((2, 4))] * 4, r"samples of different shapes"),
    ],
)
def test_a_list_of_rows_of_several_lengths_is_refused_naming_the_field(
    rows: list[Any], said: str
) -> None:
    # NumPy's "setting an array element with a sequence ... inhomogeneous shape" came out
    # of make_global_batch, naming neither the field nor what to do.
    with pytest.raises(DataError, match=rf"field 'tokens' holds .*{said}.*no jax array"):
        make_global_batch({"tokens": rows, "y": np.arange(8)}, batch_sharding(), 8)


@pytest.mark.parametrize("scalar", [np.float32(3.5), 7, np.array(2)])
def test_a_field_with_no_batch_axis_is_named_as_such_not_as_zero_rows(scalar: Any) -> None:
    # A 0-d field (a transform's per-batch scalar) was said to have "0 rows here".
    with pytest.raises(ConfigError, match=r"field 'lr' is one value \(shape \(\)\), not rows"):
        make_global_batch({"x": np.zeros((8, 2)), "lr": scalar}, batch_sharding(), 8)


@pytest.mark.parametrize("batch", [(np.zeros(8), np.ones(8)), [np.zeros(8)], np.zeros(8)])
def test_a_batch_that_is_no_dict_of_fields_is_refused_naming_its_type(batch: Any) -> None:
    # A tuple (x, y), as a hand-made pipeline yields, was "AttributeError: 'tuple' object
    # has no attribute 'items'" from inside make_global_batch.
    kind = type(batch).__name__
    with pytest.raises(ConfigError, match=rf"batch must be a dict of fields.*\(got a {kind}\)"):
        make_global_batch(batch, batch_sharding(), 8)
