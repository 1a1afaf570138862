"""What a JAX user porting a Grain pipeline meets (session 53): a run restored on
another device count, whose mesh no longer divides the global batch. (The orbax
recipe's fix, params put on the mesh, was checked by hand: docs/frameworks.md.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is an optional extra (pip install jax jaxlib)")

from _adapter_data import token_source  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from headrace.errors import ConfigError  # noqa: E402
from headrace.jax import JaxLoader, host_rows, make_global_batch, numpy_loader  # noqa: E402

try:  # as test_jax.py: several CPU devices (only before jax's backend starts)
    jax.config.update("jax_num_cpu_devices", 4)
except RuntimeError:
    pass


def test_a_batch_the_mesh_does_not_divide_is_told_the_split_and_what_divides(
    root: Path,
) -> None:
    # A run saved on 4 devices and restored on 3 (a mesh over the devices left) with the
    # same global batch of 8: the refusal repeated jax's error (the sharding twice) and
    # said only "give a batch size that the sharding's batch axis divides", not which
    # sizes those are, nor that a mesh of 1, 2 or 4 along the batch keeps the batch of 8.
    three = NamedSharding(Mesh(np.array(jax.devices()[:3]), ("data",)), P("data"))
    with pytest.raises(ConfigError) as caught:
        JaxLoader(token_source(root), batch_size=8, sharding=three, steps=1)
    said = str(caught.value)
    assert "splits the batch axis 3 ways" in said, said
    assert "a multiple of 3 (6 or 9;" in said, said
    assert "1 or 2 ways" in said, said  # what 3 devices can split a batch of 8 into
    assert said.count("NamedSharding(") == 1, said
    for call in (
        lambda: numpy_loader(token_source(root), batch_size=8, sharding=three, steps=1),
        lambda: host_rows(three, 8),
        lambda: make_global_batch({"x": np.zeros((8, 2), np.uint16)}, three, 8),
    ):
        with pytest.raises(ConfigError, match=r"a multiple of 3 \(6 or 9;"):
            call()
    # A (data, model) mesh with the batch over both, and one with it replicated over model.
    mesh = jax.make_mesh((2, 2), ("data", "model"))
    both = NamedSharding(mesh, P(("data", "model")))
    with pytest.raises(
        ConfigError, match=r"splits the batch axis 4 ways.*a multiple of 4 \(4 or 8;"
    ):
        JaxLoader(token_source(root), batch_size=6, sharding=both, steps=1)
    data = NamedSharding(mesh, P("data"))
    with pytest.raises(
        ConfigError, match=r"splits the batch axis 2 ways.*a multiple of 2 \(4 or 6;"
    ):
        JaxLoader(token_source(root), batch_size=5, sharding=data, steps=1)
