"""One of N JAX processes on CPU (``jax.distributed``, localhost coordinator).

    python jax_multiprocess.py ROOT OUT PORT NUM_PROCESSES PROCESS_ID

Each process reads its rows of every global batch into a global jax.Array
over a mesh of all processes' CPU devices, checks its addressable shards,
and gathers the whole batch back; process 0 writes the digests to OUT.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import numpy as np

jax.config.update("jax_num_cpu_devices", 2)
jax.config.update("jax_cpu_collectives_implementation", "gloo")

from _adapter_data import BATCH, token_source  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from headrace.jax import JaxLoader  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402


def main(root: Path, out: Path, port: int, n: int, pid: int) -> None:
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=n, process_id=pid)
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    sharding = NamedSharding(mesh, P("data"))
    digests = []
    with JaxLoader(token_source(root), batch_size=BATCH, sharding=sharding, seed=5, steps=6) as ld:
        assert (ld.loader.rank, ld.loader.world_size) == (pid, n)
        for batch in ld:
            full = {
                k: np.asarray(multihost_utils.process_allgather(v, tiled=True))
                for k, v in batch.items()
            }
            digests.append(batch_digest([full]))
    if pid == 0:
        out.write_text(json.dumps(digests))
    jax.distributed.shutdown()


if __name__ == "__main__":
    r, o, port, n, pid = sys.argv[1:]
    main(Path(r), Path(o), int(port), int(n), int(pid))
