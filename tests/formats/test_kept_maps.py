"""Maps of local files kept open between visits (formats/_kept_maps.py): one budget for
the process, a file replaced since opened again, ``mincore`` asked once a while."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import headrace.formats._kept_maps as kept_maps
from headrace.formats._kept_maps import KeptMap, KeptMaps
from headrace.io._file import LocalFile
from headrace.io._resident import drop_pages


def _files(root: Path, rows: list[int]) -> list[str]:
    paths = []
    for i, n in enumerate(rows):
        np.save(root / f"{i}.npy", np.zeros((n, 256, 256), dtype=np.float32))
        paths.append(str(root / f"{i}.npy"))
    return paths


def test_maps_are_kept_within_a_count_and_bytes_for_all_owners(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At most KEPT_MAPS maps and KEPT_MAP_BYTES of files, whoever keeps them (a mixture
    # of many sources holds no more descriptors or pages than one), the one used longest
    # ago dropped first; a file larger than the bytes is mapped afresh at each visit.
    paths = _files(tmp_path, [16, 16, 16, 32])
    size = os.path.getsize(paths[0])
    maps = KeptMaps()
    a, b = maps.owner(), maps.owner()
    opened: list[tuple[int, int]] = []

    def visits(order: list[tuple[int, int]]) -> list[bool]:
        """For each visit (owner, file): whether it found the file kept."""
        found = []
        for owner, f in order:
            before = maps.kept(owner).get(f)

            def open_map(owner: int = owner, f: int = f) -> LocalFile:
                opened.append((owner, f))
                return LocalFile(paths[f])

            got = maps.get(owner, f, paths[f], open_map)
            assert got is not None
            found.append(got is before)
        return found

    monkeypatch.setattr(kept_maps, "KEPT_MAPS", 2)
    assert visits([(a, 0), (b, 0), (a, 0), (b, 1), (a, 0), (b, 0)]) == [
        False, False, True, False, True, False
    ]  # fmt: skip
    assert opened == [(a, 0), (b, 0), (b, 1), (b, 0)]
    assert len(maps) == 2 and maps.nbytes == 2 * size
    maps.drop(b)
    assert list(maps.kept(a)) == [0] and maps.kept(b) == {} and maps.nbytes == size
    maps.drop(a)
    monkeypatch.setattr(kept_maps, "KEPT_MAPS", 64)
    monkeypatch.setattr(kept_maps, "KEPT_MAP_BYTES", 2 * size)
    assert visits([(a, 0), (a, 1), (a, 0), (a, 2), (a, 0), (a, 1)]) == [
        False, False, True, False, True, False
    ]  # fmt: skip
    assert maps.nbytes == 2 * size
    maps.drop(a)
    monkeypatch.setattr(kept_maps, "KEPT_MAP_BYTES", size + size // 2)
    assert visits([(a, 0), (a, 3), (a, 3), (a, 0)]) == [False, False, False, True]
    assert maps.nbytes == size and list(maps.kept(a)) == [0]  # 3: twice the bytes
    maps.drop(a)
    assert len(maps) == 0 and maps.nbytes == 0


def test_maps_kept_share_the_descriptor_limit_with_other_holders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Readers, token sources and tables keep idle files open within one share each of
    # a quarter of ``ulimit -n``; the kept maps (two descriptors each) are one holder
    # among them, not 64 more beside them, and leave the count once they keep none.
    import weakref

    import headrace.io._open_files as open_files

    paths = _files(tmp_path, [1, 1, 1, 1])
    monkeypatch.setattr(open_files, "default_max_idle", lambda: 4)
    # (The holders of this test alone: other tests' readers may not be collected yet.)
    monkeypatch.setattr(open_files, "_HOLDERS", weakref.WeakSet())
    other = open_files.OpenFiles(LocalFile)
    open_files.hold_files(other)  # a reader keeping files: 2 holders, a share of 2
    maps = KeptMaps()
    owner = maps.owner()
    for f in range(4):
        maps.get(owner, f, paths[f], lambda f=f: LocalFile(paths[f]))
    assert sorted(maps.kept(owner)) == [2, 3]
    maps.drop(owner)
    assert open_files.idle_share() == 4  # the maps' holder gone: the reader's share is whole
    other.close()


@pytest.mark.parametrize("how", ["renamed over", "deleted", "not mappable"])
def test_a_file_no_longer_at_its_path_is_opened_again(tmp_path: Path, how: str) -> None:
    paths = _files(tmp_path, [16])
    maps = KeptMaps()
    owner = maps.owner()
    first = maps.get(owner, 0, paths[0], lambda: LocalFile(paths[0]))
    assert first is not None
    assert maps.get(owner, 0, paths[0], lambda: pytest.fail("kept: not opened")) is first
    if how == "renamed over":
        np.save(tmp_path / "new.npy", np.ones((16, 256, 256), dtype=np.float32))
        os.replace(tmp_path / "new.npy", paths[0])
    elif how == "deleted":
        os.unlink(paths[0])
    else:  # the file is where it was; the opener says not to map it (None): nothing kept
        maps.drop(owner)
        assert maps.get(owner, 0, paths[0], lambda: None) is None
        assert len(maps) == 0
        return
    again = maps.get(owner, 0, paths[0], lambda: None)
    assert again is None and len(maps) == 0


def test_a_map_found_in_memory_is_not_asked_again_for_a_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # mincore costs ~60 us a 4 MiB file: asked at every visit, 20% of an epoch of 4 KB
    # rows. A kept map found all in memory is read through for RESIDENT_FOR without
    # asking; then it is asked again, and a file no longer in memory (or larger than
    # WHOLE_RESIDENT: too dear to ask whole) has the rows of each visit asked.
    path = _files(tmp_path, [16])[0]
    asked: list[int] = []
    resident = LocalFile.resident

    def counted(self: LocalFile, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        asked.append(int(lengths.sum()))
        return resident(self, offsets, lengths)

    monkeypatch.setattr(LocalFile, "resident", counted)
    now = [100.0]
    monkeypatch.setattr(kept_maps.time, "monotonic", lambda: now[0])
    size = os.path.getsize(path)
    kept = KeptMap(LocalFile(path))
    starts, ends = np.array([4096, 65536]), np.array([8192, 69632])
    assert kept.in_memory(starts, ends) and kept.in_memory(starts, ends)  # just written
    assert asked == [size]
    drop_pages(path)
    if resident(kept.file, np.array([0]), np.array([size])).any():
        pytest.skip("this filesystem keeps its pages in memory (tmpfs?)")
    now[0] += kept_maps.RESIDENT_FOR / 2
    assert kept.in_memory(starts, ends)  # not asked: faulted in by the copy if read
    assert asked == [size]
    now[0] += kept_maps.RESIDENT_FOR / 2
    assert not kept.in_memory(starts, ends) and not kept.in_memory(starts, ends)
    assert asked == [size, size, 8192, 8192]  # the whole file once, then the rows asked
    kept.file.close()
    monkeypatch.setattr(kept_maps, "WHOLE_RESIDENT", size - 1)
    kept, asked[:] = KeptMap(LocalFile(path)), []
    assert not kept.in_memory(starts, ends) and not kept.in_memory(starts, ends)
    assert asked == [8192, 8192]
    kept.file.close()


_FORKED = """
import os, sys
from headrace.formats._kept_maps import KeptMaps
from headrace.io._file import LocalFile
path = sys.argv[1]
maps = KeptMaps()
owner = maps.owner()
parents = maps.get(owner, 0, path, lambda: LocalFile(path))
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    mine = maps.get(owner, 0, path, lambda: LocalFile(path))
    os.write(write, f"{mine is parents} {len(maps)}".encode())
    os._exit(0)
os.waitpid(pid, 0)
print(os.read(read, 100).decode(), maps.kept(owner)[0] is parents, parents.file.closed)
"""


def test_a_forked_process_drops_the_parents_maps(tmp_path: Path) -> None:
    # A worker forked after its parent kept maps opens its own (the parent's descriptors
    # and maps are the parent's), and leaves the parent's kept. In a process of its
    # own: one that imported JAX warns at every fork (an error under this suite).
    import subprocess
    import sys

    paths = _files(tmp_path, [16])
    got = subprocess.run(
        [sys.executable, "-c", _FORKED, paths[0]], capture_output=True, text=True, check=True
    )
    assert got.stdout.split() == ["False", "1", "True", "False"], got.stderr
