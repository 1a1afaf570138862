"""JaxLoader's batches do not depend on its prefetch depth, and an iteration closed part
way resumes where it stopped (session 48)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is an optional extra (pip install jax jaxlib)")

from _adapter_data import token_source  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from headrace.jax import JaxLoader, array_state  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402

try:  # as test_jax.py: several CPU devices (only before jax's backend starts)
    jax.config.update("jax_num_cpu_devices", 4)
except RuntimeError:
    pass

STEPS = 4


def digest(batch: dict[str, Any]) -> str:
    return batch_digest([{k: np.asarray(v) for k, v in batch.items()}])


def loader(root: Path, prefetch: int) -> JaxLoader:
    n = len(jax.devices())  # 4 here, 1 where another module started jax first
    mesh = jax.make_mesh((min(n, 2), n // min(n, 2)), ("data", "model"))
    sharding = NamedSharding(mesh, P("data", "model"))
    return JaxLoader(
        token_source(root), batch_size=8, sharding=sharding, seed=3, steps=STEPS, prefetch=prefetch
    )


def test_every_prefetch_depth_gives_the_same_arrays_and_a_closed_iterator_resumes(
    root: Path,
) -> None:
    with loader(root, 0) as ld:
        whole = [digest(b) for b in ld]
    for prefetch in range(5):
        with loader(root, prefetch) as ld:
            it = iter(ld)
            first = [digest(next(it)) for _ in range(prefetch % 3 + 1)]
            it.close()
            state = jax.tree.map(np.asarray, array_state(ld.state_dict()))
            rest = [digest(b) for b in ld]  # the same loader goes on
        with loader(root, prefetch) as again:
            again.load_state_dict(state)  # and a new one from the saved state
            assert [digest(b) for b in again] == rest
        assert first + rest == whole, prefetch
