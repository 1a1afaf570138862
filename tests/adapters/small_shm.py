"""Worker rings that do not fit in ``/dev/shm``, as in a container's default 64 MB.

Run by ``test_torch_workers.py`` in a mount namespace of its own whose ``/dev/shm``
is a tmpfs of 256 KiB (``unshare -m``; the machine's ``/dev/shm`` is untouched)::

    python small_shm.py ROOT

Two workers each need a ring of 4 slots of 32 batches of 64 x 17 uint32 tokens
(about 140 KiB a slot). Prints the error the iteration raised, or ``ok``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _adapter_data import token_source, write_tokens

from headrace._shm_ring import RingConfig, WorkerBatches


def main(root: Path) -> None:
    write_tokens(root)
    loader = {"batch_size": 64, "seed": 5, "steps": 200, "prefetch": 0}
    cfg = RingConfig(source=token_source(root), loader=loader, workers=2, slots=4)
    try:
        for _ in WorkerBatches(cfg, context="spawn"):
            pass
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}")
        for note in getattr(exc, "__notes__", []):
            print(note.splitlines()[0])
    else:
        print("ok")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
