"""Reads mutated cases in a child process, one JSON line per case, for ``_harness``.

Run as ``python _child.py TARGET ROOT FIRST``: reads ``ROOT/NNNN`` for every case from
``FIRST`` on with the target's reader. A crash (a segfault in a mapped Arrow or HDF5
file) or a hang ends only this process; the parent names the case and starts another
process after it. Address space is capped so that a forged length that allocates
gigabytes fails here as a MemoryError instead of swapping the machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import traceback
from pathlib import Path

#: Address space of the child: the interpreter, NumPy, PyArrow and h5py need about 1.5 GiB
#: of mappings; a read of a few small batches never needs more than this.
ADDRESS_SPACE = 6 << 30


def _outcome(target: str, case: Path) -> dict[str, object]:
    from _targets import TARGETS

    from headrace.errors import HeadraceError

    t = TARGETS[target]
    try:
        out = t.read(case)
    except HeadraceError as exc:
        return {"kind": "error", "type": type(exc).__name__, "message": str(exc)}
    except BaseException as exc:
        tb = traceback.extract_tb(exc.__traceback__)
        return {
            "kind": "foreign",
            "type": type(exc).__name__,
            "message": str(exc)[:2000],
            "where": [f"{f.filename}:{f.lineno} {f.name}" for f in tb[-6:]],
        }
    return {"kind": "ok", "digest": hashlib.sha256(out).hexdigest()}


def main() -> None:
    target, root, first = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    cases = sorted(p for p in root.iterdir() if p.is_dir())
    for i in range(first, len(cases)):
        print(json.dumps({"start": i}), flush=True)
        print(json.dumps({"case": i, **_outcome(target, cases[i])}), flush=True)
    os._exit(0)  # no interpreter teardown: a leaked thread of a failed case must not hang it


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
