"""What the log and the errors say of corrupt files (session 53).

A tar shard cut short is counted 0 at open under ``on_corrupt="replace"``: its samples
are left out of the run, but the log said "replacing the samples of a corrupt file".
And a source given as a list of paths named nothing before the too-many-corrupt
error's colon (``DataError: : 2 of 4 files are corrupt``).
"""

from __future__ import annotations

import io
import logging
import tarfile
from pathlib import Path

import pytest

from headrace.errors import DataError
from headrace.formats import FileSource


def _shards(root: Path, n: int = 4) -> list[Path]:
    root.mkdir()
    paths = []
    for s in range(n):
        path = root / f"s{s}.tar"
        with tarfile.open(path, "w") as tar:
            for k in range(3):
                for field, body in (("txt", f"caption {s} {k}".encode()), ("cls", b"1")):
                    info = tarfile.TarInfo(f"{s:02d}{k:04d}.{field}")
                    info.size = len(body)
                    tar.addfile(info, io.BytesIO(body))
        paths.append(path)
    return paths


def test_a_shard_left_out_at_open_is_said_left_out_not_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    paths = _shards(tmp_path / "wds")
    # Its first header's checksum not a number: no sample of it can be read. (A shard cut
    # short keeps its samples before the cut since 2026-12-07: tests/formats/test_tar_cut_s54.py.)
    damaged = bytearray(paths[1].read_bytes())
    damaged[148:156] = b"9999999\0"
    paths[1].write_bytes(bytes(damaged))
    with caplog.at_level(logging.WARNING, logger="headrace"):
        src = FileSource(tmp_path / "wds", format="tar", on_corrupt="replace", max_corrupt=0.5)
    assert src.counts.tolist() == [3, 0, 3, 3]
    said = [r.getMessage() for r in caplog.records if "corrupt file" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("headrace: leaving out the samples"), said
    assert "s1.tar" in said[0] and "checksum" in said[0]
    src.close()


def test_too_many_corrupt_files_of_a_list_of_paths_names_the_list(tmp_path: Path) -> None:
    paths = _shards(tmp_path / "wds")
    for p in paths[:2]:
        p.write_bytes(p.read_bytes()[:700])
    with pytest.raises(DataError) as caught:
        FileSource([str(p) for p in paths], format="tar", on_corrupt="replace", max_corrupt=0.2)
    assert str(caught.value).startswith(
        "a list of 4 paths: 2 of the 8 samples of 4 tar shards are broken"  # (s56: samples)
    ), str(caught.value)
