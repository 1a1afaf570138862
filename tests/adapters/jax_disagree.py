"""One of 2 JAX processes whose loaders disagree, then agree: JaxLoaders, then
numpy_loaders (``jax_numpy_disagree.py``), in one pair of processes (a pair's start,
importing jax and joining jax.distributed, is most of its CPU).

    python jax_disagree.py ROOT OUT PORT NUM_PROCESSES PROCESS_ID

Three JaxLoaders in turn, over a mesh of both processes' devices: process 1 with
``seed + process_index`` (a habit from per-process PRNG keys); a state loaded on
process 0 alone; both alike. Then ``jax_numpy_disagree.cases``. Last, on process 0
alone, a JaxLoader that process 1 never iterates (its wait for the other cut to 2 s
by ``HEADRACE_JAX_WAIT_S``), then ``jax_numpy_disagree.alone``. Each process writes
to ``OUT.<pid>`` (JSON) ``{"jax": [...], "numpy": [...]}``: what iterating each gave,
the ``ConfigError``'s message, the digest of the first global batch gathered back, or
``"not iterated"``; for the JaxLoader process 0 iterates alone,
``{"warnings": [...], "where": [...], "error": ...}``.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from _jax_process import cpu_devices, data_sharding, gathered, run

cpu_devices()

from _adapter_data import BATCH, token_source  # noqa: E402
from jax_numpy_disagree import alone as numpy_alone  # noqa: E402
from jax_numpy_disagree import cases as numpy_cases  # noqa: E402

import headrace.jax._agree  # noqa: E402
from headrace.errors import ConfigError  # noqa: E402
from headrace.jax import JaxLoader  # noqa: E402


def main(root: Path, n: int, pid: int) -> dict[str, list[Any]]:
    got = loaders(root, pid)
    numpy_got = numpy_cases(root, n, pid)
    got.append(alone(root) if pid == 0 else "not iterated")
    if pid == 0:
        numpy_got.append(numpy_alone(root))
    return {"jax": got, "numpy": numpy_got}


def loaders(root: Path, pid: int) -> list[Any]:
    sharding = data_sharding()
    got: list[Any] = []
    for case in ("seed", "state", "alike"):
        seed = 5 + pid if case == "seed" else 5
        with JaxLoader(token_source(root), batch_size=BATCH, sharding=sharding, seed=seed) as ld:
            if case == "state" and pid == 0:
                saved = ld.state_dict()
                ld.load_state_dict({**saved, "step": 2})
            try:
                batch = next(iter(ld))
            except ConfigError as exc:
                got.append(str(exc))
                continue
            got.append(gathered(batch))
            # The store keeps this start's key, and the one before it is gone.
            client = headrace.jax._agree._coordination_client()
            assert client.key_value_try_get(f"headrace/jax/agree/2/{pid}")
            try:
                client.key_value_try_get(f"headrace/jax/agree/1/{pid}")
            except Exception:
                pass
            else:
                raise AssertionError("the key of iteration start 1 is left in the store")
    return got


def alone(root: Path) -> dict[str, Any] | str:
    """What iterating a JaxLoader that process 1 never iterates says, on process 0."""
    with JaxLoader(token_source(root), batch_size=BATCH, sharding=data_sharding(), seed=5) as ld:
        os.environ["HEADRACE_JAX_WAIT_S"] = "2"  # (10 minutes)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                next(iter(ld))
            except ConfigError as exc:
                said = [str(w.message) for w in caught]
                where = sorted({f"{w.category.__name__} {w.filename}" for w in caught})
                return {"warnings": said, "where": where, "error": str(exc)}
    return "iterated alone"


if __name__ == "__main__":
    run(main)
