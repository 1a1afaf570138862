"""Run docs/frameworks.md's first JAX block as a user would: on 4 CPU devices, with a
jitted step of their own (an embedding lookup, a cross-entropy and SGD) for its
``train_step`` and that model's params for its ``state``.

    python jax_first_example_s56.py DATA_DIR OUT_JSON

Writes what each global batch was (dtype, shape, spec, each device's shard shape and
whether its bytes equal the plan's, read by a plain NumPy ``Loader``) and whether the
params moved; the block's own error, if any, goes to stderr and the exit status.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"  # before jax starts

import json
import re
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from headrace.formats import TokenSource
from headrace.pipeline import Loader

DOCS = Path(__file__).resolve().parents[2] / "docs" / "frameworks.md"
STEPS, VOCAB = 3, 1024


class Done(Exception):
    """Ends the block's endless loop after ``STEPS`` steps."""


def first_jax_block() -> str:
    text = DOCS.read_text()
    after = text[text.index("\n## JAX\n") :]
    found = re.search(r"```python\n(.*?)```", after, re.S)
    assert found, "no python block under ## JAX"
    return found.group(1)


def main(data: Path, out: Path) -> None:
    source = TokenSource(str(data / "train.bin"), dtype="uint16", context=16)
    seen: list[dict[str, Any]] = []

    @jax.jit
    def step(params: Any, batch: Any) -> Any:
        x = batch["x"].astype(jnp.int32)  # uint16 tokens, cast on the device
        y = batch["y"].astype(jnp.int32)

        def loss(p: Any) -> Any:
            logits = p["emb"][x] @ p["out"]
            return -jnp.take_along_axis(jax.nn.log_softmax(logits), y[..., None], -1).mean()

        grads = jax.grad(loss)(params)
        return jax.tree.map(lambda w, g: w - 0.5 * g, params, grads)

    def train_step(state: Any, batch: Any) -> Any:
        seen.append(
            {
                k: {
                    "dtype": str(v.dtype),
                    "shape": list(v.shape),
                    "spec": str(v.sharding.spec),
                    "shards": sorted({tuple(s.data.shape) for s in v.addressable_shards}),
                    "devices": len(v.sharding.device_set),
                    "host": np.asarray(jax.device_get(v)),
                }
                for k, v in batch.items()
            }
        )
        state = step(state, batch)
        if len(seen) == STEPS:
            raise Done
        return state

    key = jax.random.key(0)
    state0 = {
        "emb": jax.random.normal(key, (VOCAB, 8)),
        "out": jax.random.normal(jax.random.fold_in(key, 1), (8, VOCAB)),
    }
    namespace: dict[str, Any] = {"source": source, "state": state0, "train_step": train_step}
    try:
        exec(compile(first_jax_block(), str(DOCS), "exec"), namespace)
    except Done:
        pass
    moved = not np.array_equal(np.asarray(namespace["state"]["emb"]), np.asarray(state0["emb"]))
    with Loader(source, batch_size=512, seed=1234, steps=STEPS) as plain:
        planned = list(plain)
    for got, want in zip(seen, planned, strict=True):
        for k, v in got.items():
            v["equal"] = bool(
                v["host"].dtype == want[k].dtype and v.pop("host").tobytes() == want[k].tobytes()
            )
    out.write_text(json.dumps({"batches": seen, "moved": moved}, default=list))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
