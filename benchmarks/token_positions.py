"""What position_ids cost: a Megatron token file read with positions None / "eos" / "documents".

    python benchmarks/token_positions.py [--root DIR] [--docs 16384] [--doc-tokens 2048]
                                         [--context 1024] [--batch 32] [--steps 3000]
                                         [--trials 5]

Writes (once) a Megatron ``.bin``/``.idx`` of ``--docs`` documents of 1 to
``2 * --doc-tokens`` uint16 tokens, each ending with an EOS token (id 0, and
no other 0), then times ``--steps`` batches of ``Loader(prefetch=0)`` per side,
after 200 steps of warm-up, sides in alternating order. Reports the median
microseconds per batch, the ratio to the side without positions, and the
SHA-256 of each side's ``position_ids``, which must be equal for "eos" and
"documents" (both find the same document starts here).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from headrace.formats import TokenSource, write_megatron_index
from headrace.pipeline import Loader

EOS = 0


def ensure(root: Path, docs: int, doc_tokens: int) -> Path:
    path = root / f"positions-{docs}x{doc_tokens}.bin"
    if path.exists() and path.with_suffix(".idx").exists():
        return path
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 2 * doc_tokens + 1, docs)
    tokens = rng.integers(1, 50_000, int(lengths.sum()), dtype=np.uint16)
    tokens[np.cumsum(lengths) - 1] = EOS
    tokens.tofile(path)
    write_megatron_index(path.with_suffix(".idx"), np.uint16, lengths)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path("/tmp/headrace-positions"))
    ap.add_argument("--docs", type=int, default=16384)
    ap.add_argument("--doc-tokens", type=int, default=2048)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--trials", type=int, default=5)
    a = ap.parse_args(argv)
    path = ensure(a.root, a.docs, a.doc_tokens)
    sides: dict[str, dict[str, Any]] = {
        "none": {},
        "eos": {"positions": "eos", "eos_id": EOS},
        "documents": {"positions": "documents"},
    }
    times: dict[str, list[float]] = {s: [] for s in sides}
    digests: dict[str, set[str]] = {s: set() for s in sides}
    for t in range(a.trials):
        for name in sides if t % 2 == 0 else list(sides)[::-1]:
            src = TokenSource(path, context=a.context, **sides[name])
            h = hashlib.sha256()
            with Loader(src, batch_size=a.batch, seed=t, prefetch=0) as loader:
                it = iter(loader)
                for _ in range(200):
                    next(it)
                t0 = time.perf_counter()
                batches = list(islice(it, a.steps))
                times[name].append((time.perf_counter() - t0) / a.steps)
            for b in batches[:500]:
                if "position_ids" in b:
                    h.update(b["position_ids"].tobytes())
            digests[name].add(f"{t}:{h.hexdigest()[:12]}")
    tokens = path.stat().st_size // 2
    print(
        f"{path.name}: {tokens:,} tokens in {a.docs:,} documents; B={a.batch}, "
        f"L={a.context}, {a.steps} steps x {a.trials} trials, alternating"
    )
    base = statistics.median(times["none"])
    print(f"{'positions':10} {'us/batch':>9} {'x none':>7}")
    for name in sides:
        med = statistics.median(times[name])
        print(f"{name:10} {med * 1e6:>9.1f} {med / base:>7.2f}")
    same = digests["eos"] == digests["documents"]
    print(f"position_ids equal for eos and documents (every trial): {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
