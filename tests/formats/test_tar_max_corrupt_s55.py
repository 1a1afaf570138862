"""Tar shards each with a sample lacking a field, under on_corrupt="replace": refused past
max_corrupt, saying what to do (session 55: the message gave no remedy, and a crawl's
1% of captionless samples counts every shard corrupt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from _tar_shards import write
from headrace.errors import DataError
from headrace.formats import FileSource


def _shard(path: Path, captioned: int) -> None:
    members = []
    for i in range(4):
        members.append((f"{path.stem}-{i}.cls", str(i).encode()))
        if i != captioned:  # one sample a shard without its caption
            members.append((f"{path.stem}-{i}.txt", b"a caption"))
    write(path, members)


def test_shards_of_a_few_broken_samples_past_max_corrupt_say_what_to_do(tmp_path: Path) -> None:
    for k in range(3):
        _shard(tmp_path / f"s{k}.tar", captioned=k)
    kw = {"format": "tar", "datasets": ("cls", "txt"), "on_corrupt": "replace"}
    with pytest.raises(
        DataError, match=r"2 of the 12 samples of 3 tar shards.*max_corrupt= the share"
    ):
        FileSource(str(tmp_path), **kw)  # type: ignore[arg-type]
    src = FileSource(str(tmp_path), max_corrupt=1.0, **kw)  # type: ignore[arg-type]
    try:
        assert src.counts.tolist() == [4, 4, 4]  # the broken samples replaced when read
    finally:
        src.close()
