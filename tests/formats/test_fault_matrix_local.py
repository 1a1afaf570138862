"""Local files changed under a running source, on every read path of the fault matrix
(tests/_fault_cases.py: tar and TFRecord by members/records and whole, ArrayRecord by
chunks, MDS plain and zstd, Arrow IPC under a TableSource, PNG whole, NPY rows by pread
and through a map, NPZ rows).

Once the source is open and has read other files, one file (the victim) is

- ``truncated`` to half its size: an error naming it (a ``ReadEOFError``, or "truncated
  or changed"), never a SIGBUS nor short bytes decoded;
- ``in place``: written again, the same size and inode, other bytes: refused naming it
  as changed;
- ``renamed``: another file of its size renamed over it;
- ``deleted``.

The rule for every cell: no read returns bytes of another version than the one opened
(the batches before an error are a pristine copy's), and a read that fails raises a
headrace error naming the file. A file renamed over or deleted may read on where the
source holds the version it opened (an open descriptor, a map).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from _fault_cases import CASES, build, digest, other_bytes, read
from headrace.errors import HeadraceError

MUST_FAIL = {"truncated", "in place"}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("faultmatrix-local")
    return {name: root / name for name in CASES if build(name, root / name)}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("change", ["truncated", "in place", "renamed", "deleted"])
def test_a_file_changed_mid_run_is_refused_naming_it_never_mixed(
    tmp_path: Path, built: dict[str, Path], name: str, change: str
) -> None:
    case = CASES[name]
    if name not in built:
        pytest.skip(f"{case.needs} is not installed")
    pristine = built[name]
    root = tmp_path / "data"
    shutil.copytree(pristine, root)
    want_src = case.open(str(pristine), None)
    src = case.open(str(root), None)
    try:
        clean, on = case.split(src, case.victim)
        assert read(src, clean[:8]) == read(want_src, clean[:8])
        victim = root / case.victim
        body = victim.read_bytes()
        if change == "truncated":
            os.truncate(victim, len(body) // 2)
        elif change == "in place":
            with open(victim, "r+b") as f:
                f.write(other_bytes(body, grow=False))
            st = os.stat(victim)  # a filesystem whose mtime ticks coarsely: move it on
            os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        elif change == "renamed":
            (root / "tmp").write_bytes(other_bytes(body, grow=False))
            os.replace(root / "tmp", victim)
        else:
            victim.unlink()
        want = read(want_src, on)
        got: list[str] = []
        try:
            for i in range(0, on.size, 8):
                got.append(digest(src.read(0, on[i : i + 8])))
        except HeadraceError as exc:
            assert str(victim) in str(exc), str(exc)
        else:
            assert change not in MUST_FAIL, f"{name}: a file {change} was read with no error"
        # Whatever came before an error, or all of it, was the version the source opened.
        assert got == want[: len(got)]
        # The other files still read.
        assert read(src, clean[-8:]) == read(want_src, clean[-8:])
    finally:
        src.close()
        want_src.close()
