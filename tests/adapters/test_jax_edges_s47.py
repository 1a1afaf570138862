"""Edge cases of the JAX adapter found by a review (session 47)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is an optional extra (pip install jax jaxlib)")

from _adapter_data import BATCH, token_source  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from headrace.errors import ConfigError, DataError  # noqa: E402
from headrace.jax import JaxLoader, host_rows, make_global_batch, numpy_loader  # noqa: E402
from headrace.pipeline import Loader  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402

try:  # as test_jax.py: several CPU devices (only before jax's backend starts)
    jax.config.update("jax_num_cpu_devices", 4)
except RuntimeError:
    pass


def batch_sharding() -> Any:
    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    return NamedSharding(mesh, P("data"))


def digests(loader: Any) -> list[str]:
    return [batch_digest([{k: np.asarray(v) for k, v in b.items()}]) for b in loader]


@pytest.mark.parametrize("bad", [8.0, True, "8", 0, -4])
def test_a_batch_size_that_is_no_positive_integer_is_refused_before_jax_sees_it(
    root: Path, bad: Any
) -> None:
    # 8.0 reached jax's index map, cached by shape: (8.0,) is (8,) to the cache, so after
    # the TypeError ("'float' object cannot be interpreted as an integer") every later
    # JaxLoader of batch_size=8 on that sharding got slices of floats and failed alike,
    # for the rest of the process (a notebook). 0 was a ZeroDivisionError, "8" a divmod
    # TypeError, True "the dimension size is True".
    sharding = batch_sharding()
    want = r"batch_size must be (an integer|>= 1)"
    with pytest.raises(ConfigError, match=want):
        JaxLoader(token_source(root), batch_size=bad, sharding=sharding, steps=1)
    with pytest.raises(ConfigError, match=want):
        numpy_loader(token_source(root), batch_size=bad, sharding=sharding, steps=1)
    with pytest.raises(ConfigError, match=want):
        host_rows(sharding, bad)
    with pytest.raises(ConfigError, match=want):
        make_global_batch({"x": np.zeros((8, 2), np.float32)}, sharding, bad)
    with JaxLoader(token_source(root), batch_size=BATCH, sharding=sharding, steps=2) as ld:
        assert len(digests(ld)) == 2  # the sharding still lays out a batch of 8


def test_a_numpy_integer_batch_size_reads_as_the_int(root: Path) -> None:
    # The Loader takes NumPy integers (a batch size computed with NumPy): so does JaxLoader.
    kw: dict[str, Any] = {"sharding": batch_sharding(), "seed": 5, "steps": 3}
    with Loader(token_source(root), batch_size=BATCH, seed=5, steps=3) as ld:
        want = [batch_digest([b]) for b in ld]
    with JaxLoader(token_source(root), batch_size=np.int64(BATCH), **kw) as ld:
        assert digests(ld) == want
    assert host_rows(batch_sharding(), np.int32(BATCH)) == (0, 1)


def test_what_is_no_sharding_is_refused_naming_it(root: Path) -> None:
    # Each was an AttributeError from inside headrace ("'PartitionSpec' object has no
    # attribute 'addressable_devices_indices_map'"; for a device, an empty message).
    # (numpy_loader's sharding=None is its default: rank and world size from jax.)
    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    cases = [
        (P("data"), r"got a PartitionSpec P\('data',?\)\): .*NamedSharding\(mesh, P\('data'"),
        (mesh, r"got a Mesh .*NamedSharding\(mesh, P\('data'\)\)"),
        (None, r"got None\)"),
        (jax.devices()[0], r"got a device CpuDevice\(id=0\)\): give SingleDeviceSharding\(device"),
    ]
    for bad, said in cases:
        for make in (JaxLoader, numpy_loader) if bad is not None else (JaxLoader,):
            with pytest.raises(ConfigError, match=r"sharding must be a jax\.sharding\.Sharding"):
                make(token_source(root), batch_size=BATCH, sharding=bad, steps=1)
        with pytest.raises(ConfigError, match=said):
            JaxLoader(token_source(root), batch_size=BATCH, sharding=bad, steps=1)
        with pytest.raises(ConfigError, match=said):
            make_global_batch({"x": np.zeros((8, 2), np.float32)}, bad, BATCH)
    # A dict of shardings names the field whose value is none.
    with pytest.raises(ConfigError, match=r"sharding\['y'\] must be a jax\.sharding\.Sharding"):
        JaxLoader(
            token_source(root),
            batch_size=BATCH,
            sharding={"x": batch_sharding(), "y": P("data")},
            steps=1,
        )


def test_a_field_that_is_a_dict_is_refused_not_wrapped_and_lists_are_arrays() -> None:
    # A dict field went to jax as a pytree past every check: int64 ids of 2**40 came back
    # as int32 zeros, without a word. A list of numbers was "AttributeError: 'int' object
    # has no attribute 'shape'".
    sharding = batch_sharding()
    ids = np.arange(8, dtype=np.int64) + 2**40
    with pytest.raises(ConfigError, match=r"field 'meta' is a dict \(of \['ids'\]\), not an"):
        make_global_batch({"meta": {"ids": ids}}, sharding, 8)
    out = make_global_batch(
        {"label": list(range(8)), "pair": [(i, -i) for i in range(8)]}, sharding, 8
    )
    assert np.asarray(out["label"]).tolist() == list(range(8))
    assert np.asarray(out["pair"]).shape == (8, 2)
    with pytest.raises(DataError, match=r"field 'ids' holds int64 values in \[1099511627776, "):
        make_global_batch({"ids": ids.tolist()}, sharding, 8)
