"""A data-parallel jitted run over padded rows on 4 CPU devices, checkpointed with orbax
as docs/frameworks.md's "Checkpoints with orbax" says.

    python jax_resume_s56.py straight DATA OUT   # 6 steps, a checkpoint at 3, then SIGKILL
    python jax_resume_s56.py resume DATA OUT     # from that checkpoint to step 6

Writes OUT/MODE.json: each step's global batch (every field's bytes, gathered with
``jax.device_get``, hex-digested) and the final params' digest. The straight run writes
it and then kills itself (SIGKILL), as a preempted job, leaving only its checkpoint.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"  # before jax starts

import hashlib
import json
import signal
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from headrace.formats import PaddedRows
from headrace.jax import JaxLoader

STEPS, SAVE_AT, VOCAB = 6, 3, 1024


def digest(a: Any) -> str:
    host = np.asarray(jax.device_get(a))
    return f"{host.dtype}{host.shape}:{hashlib.sha256(host.tobytes()).hexdigest()[:16]}"


@jax.jit
def train_step(params: Any, batch: Any) -> Any:
    x, y, m = batch["x"], batch["y"], batch["loss_mask"]

    def loss(p: Any) -> Any:
        logp = jax.nn.log_softmax(p["emb"][x] @ p["out"])
        picked = jnp.take_along_axis(logp, jnp.where(m, y, 0)[..., None], -1)[..., 0]
        return -(picked * m).sum() / jnp.maximum(m.sum(), 1)

    grads = jax.grad(loss)(params)
    return jax.tree.map(lambda w, g: w - 0.5 * g, params, grads)


def main(mode: str, data: Path, out: Path) -> None:
    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))
    sharding = NamedSharding(mesh, P("data"))
    key = jax.random.key(0)
    params = jax.device_put(
        {
            "emb": jax.random.normal(key, (VOCAB, 8)),
            "out": jax.random.normal(jax.random.fold_in(key, 1), (8, VOCAB)),
        },
        NamedSharding(mesh, P()),
    )
    ckpt = (out / "ckpt").absolute()
    source = PaddedRows(str(data / "rows.npy"), str(data / "mask.npy"), context=16)
    seen: dict[int, dict[str, str]] = {}
    with JaxLoader(source, batch_size=8, sharding=sharding, seed=1234, steps=STEPS) as loader:
        if mode == "resume":
            abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, params)
            with ocp.CheckpointManager(ckpt) as mgr:
                restored = mgr.restore(
                    mgr.latest_step(),
                    args=ocp.args.Composite(
                        params=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore()
                    ),
                )
            loader.load_state_dict(restored["data"])
            params = restored["params"]
        for batch in loader:
            seen[loader.step - 1] = {k: digest(v) for k, v in batch.items()}
            params = train_step(params, batch)
            if mode == "straight" and loader.step == SAVE_AT:
                with ocp.CheckpointManager(ckpt) as mgr:
                    mgr.save(
                        loader.step,
                        args=ocp.args.Composite(
                            params=ocp.args.StandardSave(params),
                            data=ocp.args.JsonSave(loader.state_dict()),
                        ),
                    )
        result = {"batches": seen, "params": {k: digest(v) for k, v in params.items()}}
        (out / f"{mode}.json").write_text(json.dumps(result))
        if mode == "straight":
            os.kill(os.getpid(), signal.SIGKILL)  # preempted: no close, no exit handlers


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
