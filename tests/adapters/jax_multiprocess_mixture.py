"""One of 2 JAX processes on CPU reading a padded-row Mixture, and saving its state.

    python jax_multiprocess_mixture.py ROOT OUT PORT NUM_PROCESSES PROCESS_ID

Two layouts over the 4 devices of 2 processes (2 each): the batch axis over
processes (``P("data", None)``), and a sequence axis over processes with the batch
within each (context parallel, ``P("data", "seq")`` on a ``("seq", "data")`` mesh:
every process holds every row, half the columns). Each process gathers the whole
batch back; process 0 writes the digests of both, and the loader state after step
``SAVE_AT`` (for a resume on another process count), to OUT, with (``tokens``) those of
jax_multiprocess.py's run, done first in these processes: a pair of process starts
(importing jax, joining jax.distributed) fewer.
"""

from __future__ import annotations

from pathlib import Path

from _jax_process import cpu_devices, gathered, run

cpu_devices()

import jax  # noqa: E402
from _adapter_data import BATCH, padded_mixture  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from jax_multiprocess import main as tokens  # noqa: E402

from headrace.jax import JaxLoader  # noqa: E402

STEPS, SAVE_AT = 6, 3


def main(root: Path, n: int, pid: int) -> dict[str, object]:
    layouts = {
        "data": NamedSharding(jax.make_mesh((n, 2), ("data", "model")), P("data", None)),
        "context": NamedSharding(jax.make_mesh((n, 2), ("seq", "data")), P("data", "seq")),
    }
    result: dict[str, object] = {"tokens": tokens(root, n, pid)}
    for name, sharding in layouts.items():
        digests = []
        kw = {"batch_size": BATCH, "sharding": sharding, "seed": 5, "steps": STEPS}
        with JaxLoader(padded_mixture(root), **kw) as ld:
            rows = (ld.loader.rank, ld.loader.world_size)
            assert rows == ((pid, n) if name == "data" else (0, 1)), rows
            for step, batch in enumerate(ld):
                x = batch["x"]
                held = {(s.index[0].start, s.index[0].stop) for s in x.addressable_shards}
                cols = {(s.index[1].start, s.index[1].stop) for s in x.addressable_shards}
                if name == "context":  # every row here; this process's half of the columns
                    assert cols == {(pid * 8, pid * 8 + 8)}, cols
                else:
                    assert held == {(pid * 4, pid * 4 + 4)} and cols == {(None, None)}, held
                digests.append(gathered(batch))
                if step + 1 == SAVE_AT and name == "data":
                    result["state"] = ld.state_dict()
        result[name] = digests
    return result


if __name__ == "__main__":
    run(main, every_process=False)
