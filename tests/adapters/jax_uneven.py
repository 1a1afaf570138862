"""One of 2 JAX processes holding unequal, and interleaved, shares of a mesh: 3 CPU
devices and 1.

    python jax_uneven.py ROOT OUT PORT NUM_PROCESSES PROCESS_ID

Two layouts of a batch of 8 over the 4 devices: ``P("data")``, under which process 0
holds rows [0, 6) and process 1 rows [6, 8) (unequal shares); and ``P(("model",
"data"))`` over a 2 x 2 mesh whose ``"data"`` axis runs over processes, under which
process 0 holds rows [0, 2) and [4, 8), interleaved with process 1's [2, 4). Under each,
a ``JaxLoader`` reads 4 steps, gathered back; then a state at step 2 is loaded and one
step read. Each process writes to ``OUT.<pid>`` (JSON), for each layout: its loaders'
``(rank, world_size)`` and the digests of the gathered batches (steps 0-3, then 2).
"""

from __future__ import annotations

import sys
from pathlib import Path

from _jax_process import cpu_devices, gathered, run

cpu_devices(3 if sys.argv[5] == "0" else 1)

import jax  # noqa: E402
import numpy as np  # noqa: E402
from _adapter_data import BATCH, token_source  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from headrace.jax import JaxLoader  # noqa: E402


def main(root: Path, n: int, pid: int) -> dict[str, object]:
    d = sorted(jax.devices(), key=lambda x: (x.process_index, x.id))  # 0, 1, 2 of p0; 3 of p1
    layouts = {
        "unequal": NamedSharding(Mesh(np.array(d), ("data",)), P("data")),
        # Rows in mesh order: d0 [0, 2), d3 [2, 4), d1 [4, 6), d2 [6, 8).
        "interleaved": NamedSharding(
            Mesh(np.array([[d[0], d[3]], [d[1], d[2]]]), ("model", "data")), P(("model", "data"))
        ),
    }
    got = {}
    for name, sharding in layouts.items():
        with JaxLoader(token_source(root), batch_size=BATCH, sharding=sharding, seed=5) as ld:
            it = iter(ld)
            digests = [gathered(next(it)) for _ in range(4)]
            del it
            state = {**ld.state_dict(), "step": 2}
            ld.load_state_dict(state)
            digests.append(gathered(next(iter(ld))))
            shares = [[x.rank, x.world_size] for x in ld.loaders]
        got[name] = {"loaders": shares, "digests": digests}
    return got


if __name__ == "__main__":
    run(main)
