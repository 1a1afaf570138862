"""One of N JAX processes on CPU (``jax.distributed``, localhost coordinator).

    python jax_multiprocess.py ROOT OUT PORT NUM_PROCESSES PROCESS_ID

Each process reads its rows of every global batch into a global jax.Array
over a mesh of all processes' CPU devices, checks its addressable shards,
and gathers the whole batch back; process 0 writes the digests to OUT. (The tests run
``main`` in jax_multiprocess_mixture.py's processes.)
"""

from __future__ import annotations

from pathlib import Path

from _jax_process import cpu_devices, data_sharding, gathered, run

cpu_devices()

from _adapter_data import BATCH, token_source  # noqa: E402

from headrace.jax import JaxLoader  # noqa: E402


def main(root: Path, n: int, pid: int) -> list[str]:
    sharding = data_sharding()
    digests = []
    with JaxLoader(token_source(root), batch_size=BATCH, sharding=sharding, seed=5, steps=6) as ld:
        assert (ld.loader.rank, ld.loader.world_size) == (pid, n)
        digests.extend(gathered(batch) for batch in ld)
    return digests


if __name__ == "__main__":
    run(main, every_process=False)
