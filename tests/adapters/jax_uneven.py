"""One of 2 JAX processes holding unequal shares of a mesh: 3 CPU devices and 1.

    python jax_uneven.py ROOT OUT PORT NUM_PROCESSES PROCESS_ID

Under ``P("data")`` over the 4 devices, process 0 holds rows [0, 6) of a batch of
8 and process 1 rows [6, 8). Each process writes to ``OUT.<pid>`` what making a
``JaxLoader`` gave: the ``ConfigError``'s message, or ``built``. Nothing is read,
so a process that goes on does not wait for the other in a collective.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax

PID = int(sys.argv[5])
jax.config.update("jax_num_cpu_devices", 3 if PID == 0 else 1)
jax.config.update("jax_cpu_collectives_implementation", "gloo")

from _adapter_data import BATCH, token_source  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from headrace.errors import ConfigError  # noqa: E402
from headrace.jax import JaxLoader  # noqa: E402


def main(root: Path, out: Path, port: int, n: int, pid: int) -> None:
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=n, process_id=pid)
    sharding = NamedSharding(jax.make_mesh((jax.device_count(),), ("data",)), P("data"))
    try:
        with JaxLoader(token_source(root), batch_size=BATCH, sharding=sharding, steps=1):
            got = "built"
    except ConfigError as exc:
        got = str(exc)
    Path(f"{out}.{pid}").write_text(got)
    jax.distributed.shutdown()


if __name__ == "__main__":
    r, o, port, n, pid = sys.argv[1:]
    main(Path(r), Path(o), int(port), int(n), int(pid))
