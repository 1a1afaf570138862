"""One of 2 JAX processes whose loaders disagree, then agree.

    python jax_disagree.py ROOT OUT PORT NUM_PROCESSES PROCESS_ID

Four loaders in turn, over a mesh of both processes' devices: process 1 with
``seed + process_index`` (a habit from per-process PRNG keys); a state loaded on
process 0 alone; both alike; then one that process 0 alone iterates (its wait for
the other cut to 2 s by ``HEADRACE_JAX_WAIT_S``). Each process writes to
``OUT.<pid>`` (JSON) what iterating each gave: the ``ConfigError``'s message, the
digest of the first global batch gathered back, or ``"not iterated"``; for the last,
on process 0, ``{"warnings": [...], "where": [...], "error": ...}``.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from _jax_process import cpu_devices, data_sharding, gathered, run

cpu_devices()

from _adapter_data import BATCH, token_source  # noqa: E402

import headrace.jax._agree  # noqa: E402
from headrace.errors import ConfigError  # noqa: E402
from headrace.jax import JaxLoader  # noqa: E402


def main(root: Path, n: int, pid: int) -> list[Any]:
    sharding = data_sharding()
    got = []
    for case in ("seed", "state", "alike", "alone"):
        seed = 5 + pid if case == "seed" else 5
        with JaxLoader(token_source(root), batch_size=BATCH, sharding=sharding, seed=seed) as ld:
            if case == "alone":
                if pid == 1:
                    got.append("not iterated")
                    continue
                os.environ["HEADRACE_JAX_WAIT_S"] = "2"  # (10 minutes)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    try:
                        next(iter(ld))
                    except ConfigError as exc:
                        said = [str(w.message) for w in caught]
                        where = sorted({f"{w.category.__name__} {w.filename}" for w in caught})
                        got.append({"warnings": said, "where": where, "error": str(exc)})
                    else:
                        got.append("iterated alone")
                continue
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


if __name__ == "__main__":
    run(main)
