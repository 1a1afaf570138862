"""What the JAX process scripts beside this file share. Each is one of the processes
``test_jax.run_two_processes`` starts:

    python SCRIPT ROOT OUT PORT NUM_PROCESSES PROCESS_ID

A script calls ``cpu_devices`` before it imports anything else of JAX's or headrace's
(the devices are fixed when JAX's backend starts), then hands its ``main`` to ``run``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np


def cpu_devices(count: int = 2) -> None:
    """This process's CPU devices, and gloo for the collectives between processes."""
    jax.config.update("jax_num_cpu_devices", count)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")


def data_sharding() -> Any:
    """The batch axis over every device of every process."""
    from jax.sharding import NamedSharding, PartitionSpec

    return NamedSharding(jax.make_mesh((jax.device_count(),), ("data",)), PartitionSpec("data"))


def gathered(batch: dict[str, Any]) -> str:
    """The digest of the whole global batch, gathered back from every process."""
    from jax.experimental import multihost_utils

    from headrace.testing import batch_digest

    full = {
        k: np.asarray(multihost_utils.process_allgather(v, tiled=True)) for k, v in batch.items()
    }
    return batch_digest([full])


def run(main: Callable[[Path, int, int], object], *, every_process: bool = True) -> None:
    """Join ``jax.distributed`` as the command line says, call ``main(root, num_processes,
    process_id)`` and write what it returns (JSON) to ``OUT.<process_id>`` or, where not
    ``every_process``, from process 0 alone to ``OUT``."""
    root, out, port, n, pid = sys.argv[1:]
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=int(n), process_id=int(pid))
    got = main(Path(root), int(n), int(pid))
    if every_process:
        Path(f"{out}.{pid}").write_text(json.dumps(got))
    elif pid == "0":
        Path(out).write_text(json.dumps(got))
    jax.distributed.shutdown()
