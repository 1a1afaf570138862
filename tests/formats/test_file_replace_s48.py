"""FileSource's on_corrupt="replace": the same files judged corrupt whatever is read first."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import DataError
from headrace.formats import FileSource


def _npz_files(root: Path, odd: int) -> None:
    """Ten NPZ files of member ``x``; file ``odd`` holds an ``extra`` member too."""
    root.mkdir()
    for i in range(10):
        members = {"x": np.full((2,), i)}
        if i == odd:
            members["extra"] = np.zeros(1)
        np.savez(root / f"{i}.npz", **members)


@pytest.mark.parametrize("threads", [0, 2])
def test_a_file_of_other_members_is_the_corrupt_one_even_when_read_first(
    tmp_path: Path, threads: int
) -> None:
    # A process whose first read decoded the odd file took its members as every file's,
    # and judged the nine others corrupt (a worker resuming there, or a random access).
    _npz_files(tmp_path / "d", odd=3)
    kw = {"format": "npz", "on_corrupt": "replace", "max_corrupt": 0.2, "shuffle": "none"}
    first = FileSource(tmp_path / "d", decode_threads=threads, **kw)
    got = first.read(0, np.array([3]))
    assert sorted(first.corrupt_files) == [str(tmp_path / "d" / "3.npz")]
    assert sorted(got) == ["index", "x"] and int(got["index"][0]) != 3
    whole = first.read(0, np.arange(10))
    other = FileSource(tmp_path / "d", decode_threads=threads, **kw)
    again = other.read(0, np.arange(10))
    assert np.array_equal(whole["index"], again["index"])
    assert np.array_equal(whole["x"], again["x"])


def test_an_exhausted_replacement_says_why_its_file_is_corrupt(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    for i in range(3):
        np.savez(tmp_path / "d" / f"{i}.npz", x=np.arange(4))
    src = FileSource(
        tmp_path / "d",
        format="npz",
        datasets=("y",),
        samples_per_file=4,
        on_corrupt="replace",
        max_corrupt=1.0,
        max_retries=2,
    )
    with pytest.raises(
        DataError,
        match=r"found no readable replacement.*did not decode: \S*npz: no member\(s\) \['y'\]",
    ):
        src.read(0, np.arange(3))


def test_the_iterable_baseline_skips_a_corrupt_file_under_replace(tmp_path: Path) -> None:
    from headrace.formats._file_modes import IterableFiles

    root = tmp_path / "n"
    root.mkdir()
    for i in range(4):
        np.save(root / f"{i}.npy", np.full((3, 2), i))
    (root / "2.npy").write_bytes(b"junk" * 20)
    src = FileSource(root, format="npy", samples_per_file=3, on_corrupt="replace", max_corrupt=0.3)
    it = IterableFiles(src, batch_size=3)
    got = [x for b in it.epoch(0, 0) for x in b["data"][:, 0].tolist()]
    it.close()
    assert sorted(got) == [0, 0, 0, 1, 1, 1, 3, 3, 3]
    assert list(src.corrupt_files) == [str(root / "2.npy")]
    src.close()
    # And on_corrupt="raise" (the default) raises, naming the file.
    src = FileSource(root, format="npy", samples_per_file=3)
    it = IterableFiles(src, batch_size=3)
    with pytest.raises(DataError, match=r"2\.npy: not an NPY file"):
        list(it.epoch(0, 0))
    it.close()
    src.close()


def test_files_of_no_record_are_refused_naming_where(tmp_path: Path) -> None:
    from headrace.errors import ConfigError

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "0.tfrecord").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"\S*t: its 1 tfrecord file\(s\) hold no sample"):
        FileSource(tmp_path / "t", format="tfrecord")
