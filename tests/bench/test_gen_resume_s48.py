"""``headrace gen`` stopped and run again: what it keeps of a file written before (s48)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from headrace.bench._datagen import (
    CHUNK_BYTES,
    is_complete,
    token_bytes_to_write,
    write_token_file,
)
from headrace.bench._kind import make_kind
from headrace.bench._workload import builtin_workloads


def test_a_token_file_longer_than_the_dataset_without_a_marker_is_written_again(
    tmp_path: Path,
) -> None:
    # Resuming after "the last whole chunk" of a file longer than the dataset (a larger
    # write under the same name, stopped before its marker; a copy) wrote nothing, and
    # marked the leftover complete: its bytes, not the seed's tokens, at the wrong size.
    fresh, left = str(tmp_path / "fresh.bin"), str(tmp_path / "left.bin")
    write_token_file(fresh, 1000, dtype="uint32", seed=3)
    with open(left, "wb") as f:
        f.truncate(2 * CHUNK_BYTES)  # sparse: no disk blocks
    assert token_bytes_to_write(left, 1000, dtype="uint32", seed=3) == 4000
    assert write_token_file(left, 1000, dtype="uint32", seed=3)
    assert Path(left).read_bytes() == Path(fresh).read_bytes()
    assert is_complete(left, {"kind": "tokens", "tokens": 1000, "dtype": "uint32", "seed": 3})


def _tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


SMALL = {
    "tokens": {"dtype": "uint16", "token_file_gib": 1e-4},
    "npz": {"files": 3, "record_bytes": 2_000, "record_bytes_stdev": 500},
    "jpeg": {"files": 3, "image_hw": [32, 48]},
    "hdf5": {"files": 2, "record_bytes": 4_000},
    "parquet": {"rows": 60, "width": 40, "files": 2, "group_rows": 10},
    "hub-images": {"rows": 12, "files": 2, "group_rows": 4, "image_hw": [24, 40]},
    "packed": {"rows": 50, "max_len": 60, "batch_rows": 10, "context": 32},
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_the_same_dataset_generated_twice_has_the_same_bytes(name: str, tmp_path: Path) -> None:
    wl = builtin_workloads()[name].replace(dataset=SMALL[name])
    for root in ("a", "b"):
        make_kind(wl, str(tmp_path / root)).write()
    first = _tree(tmp_path / "a")
    assert len(first) >= 2 and _tree(tmp_path / "b") == first
