"""One of 3 JAX processes on CPU (2 devices each) taking a state saved by one process
and reading on under three layouts (session 51).

    python jax_journey_s51.py ROOT OUT PORT NUM_PROCESSES PROCESS_ID

A plain 1-process ``Loader`` reads steps 0-1 and saves its state; each layout's
``JaxLoader`` loads it and reads steps 2-3: the batch axis over a 1-D mesh, a
``("data", "model")`` mesh with the batch over ``data`` and the sequence over ``model``,
and a batch replicated over ``data`` (every process reads it whole). Each writes the
digests of the gathered batches, its loaders' ``(rank, world_size)`` and the message of
one mistake: a ``JaxLoader``'s global arrays handed to ``make_global_batch`` again.
"""

from __future__ import annotations

from pathlib import Path

from _jax_process import cpu_devices, gathered, run

cpu_devices()

import jax  # noqa: E402
from _adapter_data import BATCH, token_source  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from headrace.errors import ConfigError  # noqa: E402
from headrace.jax import JaxLoader, make_global_batch  # noqa: E402
from headrace.pipeline import Loader  # noqa: E402

STEPS, SAVE_AT = 4, 2


def main(root: Path, n: int, pid: int) -> dict[str, object]:
    with Loader(token_source(root), batch_size=BATCH * 3, seed=5, steps=SAVE_AT) as one:
        for _ in one:
            pass
        state = one.state_dict()  # saved by 1 process, read on by 3
    mesh = jax.make_mesh((n, 2), ("data", "model"))
    layouts = {
        "batch": NamedSharding(jax.make_mesh((2 * n,), ("data",)), P("data")),
        "batch_model": NamedSharding(mesh, P("data", "model")),
        "replicated": NamedSharding(mesh, P(None, "model")),
    }
    result: dict[str, object] = {}
    for name, sharding in layouts.items():
        kw = {"batch_size": BATCH * 3, "sharding": sharding, "seed": 5, "steps": STEPS}
        with JaxLoader(token_source(root), **kw) as ld:
            ld.load_state_dict(state)
            batches = list(ld)
            result[name] = {
                "loaders": [[x.rank, x.world_size] for x in ld.loaders],
                "digests": [gathered(b) for b in batches],
            }
    try:
        make_global_batch(batches[0], layouts["replicated"], BATCH * 3)
        result["again"] = "no error"
    except ConfigError as exc:
        result["again"] = str(exc)
    return result


if __name__ == "__main__":
    run(main)
