"""One of N JAX processes on CPU (2 devices each), as a user training on several hosts
runs them (session 55).

    python jax_hosts_s55.py ROOT OUT PORT NUM_PROCESSES PROCESS_ID MODE [STATE]

``save``: a ``JaxLoader`` over a token source and one over padded rows, a global batch
of 12 over every device of every process, each gathered back for steps 0-2; process 0
writes both loaders' states to STATE. ``resume``: both loaders load STATE and read
steps 3-5. Each process writes its gathered digests to ``OUT.<process_id>``.
``exits``: process 1 stops before its loader (its data path is missing), as a host
whose mount failed does; process 0 writes the refusal its loader meets.

A process that cannot join ``jax.distributed`` here prints ``JAX-DISTRIBUTED-UNAVAILABLE``
and why, and exits 3 (the test then skips, saying so).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from _jax_process import cpu_devices, data_sharding, gathered

cpu_devices()

import jax  # noqa: E402
from _adapter_data import L, token_source  # noqa: E402

from headrace.errors import ConfigError  # noqa: E402
from headrace.formats import PaddedRows  # noqa: E402
from headrace.jax import JaxLoader  # noqa: E402

BATCH, SAVE_AT, STEPS = 12, 3, 6  # 12 rows: 4 devices (2 processes) or 6 (3) divide it


def sources(root: Path) -> dict[str, object]:
    return {
        "tokens": token_source(root),
        "rows": PaddedRows(root / "rows0.npy", root / "mask0.npy", context=L, truncate=True),
    }


def main(root: Path, out: str, n: int, pid: int, mode: str, state: Path) -> None:
    sharding = data_sharding()  # jax's backend starts here, on every process together
    if mode == "exits":
        if pid == 1:
            token_source(root / "missing")  # raises: this host's data is not there
        with JaxLoader(token_source(root), batch_size=8, sharding=sharding) as ld:
            try:
                next(iter(ld))
                said = "no error"
            except ConfigError as exc:
                said = str(exc)
        Path(f"{out}.{pid}").write_text(json.dumps(said))
        return
    got: dict[str, object] = {}
    states = {}
    for name, source in sources(root).items():
        with JaxLoader(source, batch_size=BATCH, sharding=sharding, seed=11, steps=STEPS) as ld:
            if mode == "resume":
                ld.load_state_dict(json.loads(state.read_text())[name])
            digests = []
            for batch in ld:
                digests.append(gathered(batch))
                if mode == "save" and ld.step == SAVE_AT:
                    break
            states[name] = ld.state_dict()
        got[name] = digests
    if mode == "save" and pid == 0:
        state.write_text(json.dumps(states))
    Path(f"{out}.{pid}").write_text(json.dumps(got))


if __name__ == "__main__":
    root, out, port, n, pid, mode, *rest = sys.argv[1:]
    try:
        jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=int(n), process_id=int(pid))
    except Exception as exc:  # no gloo, no sockets: the test skips, naming why
        print(f"JAX-DISTRIBUTED-UNAVAILABLE: {type(exc).__name__}: {exc}", flush=True)
        sys.exit(3)
    main(Path(root), out, int(n), int(pid), mode, Path(rest[0]) if rest else Path(out))
    jax.distributed.shutdown()
