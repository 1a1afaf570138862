"""One variant's full pass, for its digest, bytes read and peak RSS.

Run as ``python -m headrace.bench._measure`` (a JSON request on stdin, a JSON
answer on the last line of stdout) so that ``ru_maxrss`` — the peak resident
set of the whole process — belongs to this variant alone. The figure includes
the interpreter and NumPy (reported as ``rss_baseline_bytes``, the peak before
the variant opened) and file pages the variant maps and touches.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from typing import Any

from headrace.bench._kind import Kind, make_kind
from headrace.bench._machine import peak_rss_bytes
from headrace.bench._workload import Workload
from headrace.testing import update_digest

__all__ = ["measure_pass"]


def measure_pass(kind: Kind, spec: str, steps: int) -> dict[str, Any]:
    """Digest every batch of ``spec``'s first ``steps`` steps; count bytes and time."""
    rss0 = peak_rss_bytes()
    h = hashlib.sha256()
    t0 = time.perf_counter()
    stream = kind.open(spec, steps)
    first_s: float | None = None
    first_bytes = 0
    n = 0
    try:
        for batch in stream:
            if n == 0:
                first_s = time.perf_counter() - t0
                first_bytes = stream.bytes_read()
            update_digest(h, batch)
            n += 1
        read = stream.bytes_read()
    finally:
        stream.close()
    return {
        "variant": spec,
        "steps": n,
        "digest": h.hexdigest() if kind.digested(spec) else None,
        "bytes_read": read,
        "bytes_before_first_batch": first_bytes,
        "time_to_first_batch_s": first_s,
        "peak_rss_bytes": peak_rss_bytes(),
        "rss_baseline_bytes": rss0,
    }


def _main() -> int:
    req = json.loads(sys.stdin.read())
    kind = make_kind(Workload.from_dict(req["workload"]), req["root"])
    print(json.dumps(measure_pass(kind, req["variant"], int(req["steps"]))))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
