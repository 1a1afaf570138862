"""Which sources accept a state after the same files moved to another directory (a new
mount, a copied dataset)? Sources disagree: some fingerprint full paths, some names.

PYTHONPATH=src:audit python audit/repro_moved_data.py   (copies the audit data first)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import common

from headrace.formats import FileSource, PaddedRows, TableSource, TokenSource
from headrace.pipeline import Loader

old = common.build()
new = Path(str(old) + "-moved")
if not new.exists():
    shutil.copytree(old, new)

makers = {
    "TokenSource": lambda r: TokenSource([r / "a.bin"], context=16),
    "PaddedRows": lambda r: PaddedRows(r / "r1.tok.npy", r / "r1.mask.npy", context=16),
    "TableSource (parquet dir)": lambda r: TableSource(str(r / "pq"), columns=["id"]),
    "FileSource (npy dir)": lambda r: FileSource(str(r / "npy"), format="npy"),
}
for name, make in makers.items():
    with Loader(make(old), batch_size=4, seed=1) as a:
        st = a.state_dict()
    with Loader(make(new), batch_size=4, seed=1) as b:
        try:
            b.load_state_dict(st)
            print(f"{name}: accepted after the move")
        except Exception as exc:  # noqa: BLE001
            print(f"{name}: REFUSED after the move: {str(exc)[-120:]}")
