"""Do errors raised in the read-ahead thread and in worker processes reach the consumer
with their type, message and origin?

PYTHONPATH=src python audit/errors_probe.py
"""

from __future__ import annotations

import pickle
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from headrace.errors import StorageError  # noqa: E402


class PathError(Exception):
    """A user's exception whose __init__ takes other arguments than its message (common)."""

    def __init__(self, path: str, code: int) -> None:
        super().__init__(f"{path}: bad sample code {code}")
        self.path, self.code = path, code


def bad_transform(arrays, samples):
    if int(samples.numbers.max()) > 20:
        raise ValueError(f"transform refused sample {int(samples.numbers.max())}")
    return arrays


def path_error_transform(arrays, samples):
    if int(samples.numbers.max()) > 20:
        raise PathError("/data/shard-7.bin", 42)
    return arrays


def storage_error_transform(arrays, samples):
    if int(samples.numbers.max()) > 20:
        raise StorageError(5, "/data/shard-7.bin: read of bytes [0, 4096) failed: EIO")
    return arrays


def show(label: str, fn) -> None:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001
        tb = "".join(traceback.format_exception(exc))
        print(f"--- {label}: {type(exc).__module__}.{type(exc).__name__}: {exc}")
        print("    notes:", [n.splitlines()[0] for n in getattr(exc, "__notes__", [])])
        print("    origin frame in traceback:", "transform" in tb and ("_transform" in tb))
        print("    last frames:", [ln.strip() for ln in tb.splitlines() if ln.strip().startswith("File")][-3:])
    else:
        print(f"--- {label}: no error!")


def main() -> None:
    from headrace.formats import TokenSource
    from headrace.pipeline import Loader
    from headrace.torch import HeadraceDataLoader, TorchDataset

    root = Path(tempfile.mkdtemp())
    np.random.default_rng(0).integers(0, 1000, 1 << 16, dtype=np.uint16).tofile(root / "t.bin")

    def src():
        return TokenSource(root / "t.bin", dtype="uint16", context=16)

    for name, tf in [
        ("ValueError", bad_transform),
        ("PathError (custom __init__)", path_error_transform),
        ("StorageError", storage_error_transform),
    ]:
        def thread(tf=tf):
            with Loader(src(), batch_size=4, prefetch=8, transform=tf) as ld:
                for _ in ld:
                    pass

        show(f"Loader prefetch=8, {name}", thread)

        def workers(tf=tf):
            ds = TorchDataset(src(), batch_size=4, transform=tf)
            with HeadraceDataLoader(ds, num_workers=2) as ld:
                for _ in ld:
                    pass

        show(f"HeadraceDataLoader num_workers=2, {name}", workers)

        def stock(tf=tf):
            from torch.utils.data import DataLoader

            ds = TorchDataset(src(), batch_size=4, transform=tf)
            for _ in DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="forkserver"):
                pass

        show(f"torch DataLoader num_workers=2, {name}", stock)
    # The root cause of the PathError case, without processes:
    e = PathError("/data/x", 1)
    try:
        pickle.loads(pickle.dumps(e))
    except Exception as exc:  # noqa: BLE001
        print("pickle round trip of PathError:", type(exc).__name__, exc)


if __name__ == "__main__":
    main()
