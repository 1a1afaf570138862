"""Resumable, deterministic dataset writing for benchmarks.

Every file is a pure function of ``(seed, name)``; a file is complete when its
marker ``NAME.done`` holds the parameters it was written with. Token files are
written in 64 MiB chunks, each a function of ``(seed, chunk)``, so an
interrupted write resumes at the last whole chunk instead of starting over.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["Progress", "is_complete", "mark_complete", "write_token_file"]

Progress = Callable[[int, int], None]
CHUNK_BYTES = 64 << 20
VOCAB = 50_304  # GPT-2's vocabulary rounded up, as nanoGPT pads it


def _marker(path: str) -> str:
    return path + ".done"


def is_complete(path: str, params: dict[str, Any]) -> bool:
    """``path`` exists and its marker records exactly ``params`` and its size."""
    try:
        with open(_marker(path)) as f:
            meta = json.load(f)
        return bool(meta == {**params, "bytes": os.path.getsize(path)})
    except (OSError, ValueError):
        return False


def mark_complete(path: str, params: dict[str, Any]) -> None:
    with open(_marker(path), "w") as f:
        json.dump({**params, "bytes": os.path.getsize(path)}, f)


def write_token_file(
    path: str,
    num_tokens: int,
    *,
    dtype: str = "uint32",
    seed: int = 0,
    progress: Progress | None = None,
) -> bool:
    """Write ``num_tokens`` random tokens to ``path`` unless done; True if it wrote."""
    dt = np.dtype(dtype)
    params = {"kind": "tokens", "tokens": num_tokens, "dtype": dt.name, "seed": seed}
    total = num_tokens * dt.itemsize
    if is_complete(path, params):
        if progress:
            progress(total, total)
        return False
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if os.path.exists(_marker(path)):
        os.remove(_marker(path))  # written with other parameters: start over
        done = 0
    else:  # resume after the last whole chunk of an interrupted write
        done = os.path.getsize(path) // CHUNK_BYTES * CHUNK_BYTES if os.path.exists(path) else 0
    per_chunk = CHUNK_BYTES // dt.itemsize
    high = min(VOCAB, int(np.iinfo(dt).max) + 1)
    with open(path, "r+b" if done else "wb") as f:
        f.truncate(done)
        f.seek(done)
        for chunk in range(done // CHUNK_BYTES, -(-num_tokens // per_chunk)):
            n = min(per_chunk, num_tokens - chunk * per_chunk)
            rng = np.random.default_rng([seed, chunk])
            f.write(rng.integers(0, high, n, dtype=dt).data)
            if progress:
                progress(min(total, (chunk + 1) * CHUNK_BYTES), total)
        f.flush()
        os.fsync(f.fileno())
    mark_complete(path, params)
    return True
