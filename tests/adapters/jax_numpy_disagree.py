"""``make_global_batch`` fed by ``numpy_loader``s that disagree, then agree: run by
``jax_disagree.py`` in its pair of JAX processes, after its JaxLoaders.

Seven loaders in turn (``cases``): process 1 with ``seed + process_index`` (the default
rank and world size); a state loaded on process 0 alone (rows from a sharding of both
processes' devices); both alike; a ``JaxLoader`` alike after them (the iteration starts
of both kinds are numbered together); then, with a rank and world size of the caller's
own (world size 2, the process count): ``seed + process_index``; ``rank=0`` on both
processes; each its own rank, alike; world size 1 on both (whole batches, not compared:
``make_global_batch`` keeps each process's rows); world size 4 (refused where it is
made). Then (``alone``) a loader process 0 alone makes and iterates: with
``HEADRACE_JAX_WAIT_S`` of ``soon``, then of 2 s. What making and iterating each gave:
the ``ConfigError``'s message, the digest of the first global batch gathered back, or
(``alone``) ``{"bad wait": ..., "warnings": [...], "error": ...}``.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from _adapter_data import BATCH, token_source
from _jax_process import data_sharding, gathered

from headrace.errors import ConfigError
from headrace.jax import JaxLoader, make_global_batch, numpy_loader


def cases(root: Path, n: int, pid: int) -> list[Any]:
    sharding = data_sharding()
    got: list[Any] = []
    cases = ("seed", "state", "alike", "jax", "own rank seed", "both rank 0", "own rank", "whole")
    for case in cases:
        seed = 5 + pid if case in ("seed", "own rank seed") else 5
        kw = {"batch_size": BATCH, "seed": seed}
        if case == "jax":
            ld = JaxLoader(token_source(root), sharding=sharding, **kw)
        elif case.startswith("own rank"):
            ld = numpy_loader(token_source(root), rank=pid, world_size=n, **kw)
        elif case == "whole":  # every process reads whole batches: not compared
            ld = numpy_loader(token_source(root), rank=0, world_size=1, **kw)
        elif case == "both rank 0":
            ld = numpy_loader(token_source(root), rank=0, world_size=n, **kw)
        elif case == "seed":
            ld = numpy_loader(token_source(root), **kw)
        else:
            ld = numpy_loader(token_source(root), sharding=sharding, **kw)
        with ld:
            if case == "state" and pid == 0:
                ld.load_state_dict({**ld.state_dict(), "step": 2})
            try:
                batch = next(iter(ld))
            except ConfigError as exc:
                got.append(str(exc))
                continue
            if case != "jax":
                batch = make_global_batch(batch, sharding, BATCH)
            got.append(gathered(batch))
    try:  # ranks 2 and 3 would be read by no process
        numpy_loader(token_source(root), batch_size=BATCH, seed=5, rank=pid, world_size=4)
    except ConfigError as exc:
        got.append(str(exc))
    return got


def alone(root: Path) -> dict[str, Any]:
    """What iterating a numpy_loader that process 1 never makes says."""
    said: dict[str, Any] = {}
    with numpy_loader(token_source(root), batch_size=BATCH, seed=5) as ld:
        for wait in ("soon", "2"):
            os.environ["HEADRACE_JAX_WAIT_S"] = wait
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    next(iter(ld))
                except ConfigError as exc:
                    said["bad wait" if wait == "soon" else "error"] = str(exc)
            said.setdefault("warnings", []).extend(str(w.message) for w in caught)
    return said
