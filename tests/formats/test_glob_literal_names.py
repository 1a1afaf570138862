"""Local names holding ``*``, ``?`` or ``[`` are read as written where they exist, by files,
tokens and tables alike; a wildcard only past them (:func:`literal_parts`).

Each name sits beside the files its reading as a pattern would pick instead
(``shard[01].bin`` beside ``shard0.bin`` and ``shard1.bin``; ``d[1]/`` beside ``d1/``),
holding other values, so reading the wrong ones shows in the values read.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError, FormatError, ObjectNotFoundError
from headrace.formats import FileSource, TableSource, TokenSource
from headrace.formats._url_glob import ESCAPE_HINT, literal_parts

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

MINE, OTHER = 7, 1  # the values in the named files; in those a pattern would pick


def _values(src: TokenSource | TableSource | FileSource) -> list[int]:
    got = src.read(0, np.arange(src.samples_per_epoch, dtype=np.int64))
    key = "data" if "data" in got else "x"
    return sorted({int(v) for v in np.asarray(got[key]).ravel()})


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for name, v in (("shard[01].bin", MINE), ("shard0.bin", OTHER), ("shard1.bin", OTHER)):
        np.full(200, v, np.uint16).tofile(tmp_path / name)
    for name, v in (("t[01].parquet", MINE), ("t0.parquet", OTHER), ("t1.parquet", OTHER)):
        pq.write_table(pa.table({"x": [v] * 10}), tmp_path / name)
    for folder, v in (("d[1]", MINE), ("d1", OTHER)):
        (tmp_path / folder).mkdir()
        np.save(tmp_path / folder / "a.npy", np.full(3, v))
        np.full(200, v, np.uint16).tofile(tmp_path / folder / "s.bin")
        pq.write_table(pa.table({"x": [v] * 10}), tmp_path / folder / "p.parquet")
    (tmp_path / "i").mkdir()
    np.save(tmp_path / "i" / "a?.npy", np.full(3, MINE))
    np.save(tmp_path / "i" / "ab.npy", np.full(3, OTHER))
    return tmp_path


def test_a_name_that_exists_is_read_as_written(root: Path) -> None:
    # Before: the table read t0 and t1 (values [1]), FileSource d1/a.npy; tokens were right.
    assert _values(TokenSource(str(root / "shard[01].bin"), dtype="uint16", context=8)) == [MINE]
    assert _values(TableSource(str(root / "t[01].parquet"))) == [MINE]


@pytest.mark.parametrize("escape", [False, True])
def test_a_folder_named_with_brackets_is_that_folder_under_a_wildcard(
    root: Path, escape: bool
) -> None:
    # Before: d[1]/*.npy (and *.bin, *.parquet) read d1/'s files, without a word.
    d = os.path.join(str(root), "d[[]1]" if escape else "d[1]")
    files = FileSource(os.path.join(d, "*.npy"), format="npy")
    assert files.files.keys == [str(root / "d[1]" / "a.npy")]
    assert _values(files) == [MINE]
    assert _values(TokenSource(os.path.join(d, "*.bin"), dtype="uint16", context=8)) == [MINE]
    assert _values(TableSource(os.path.join(d, "*.parquet"))) == [MINE]


def test_a_wildcard_still_matches_where_the_name_does_not_exist(root: Path) -> None:
    # i/a?.npy exists: that file (a FileSource takes it as a list of one), not i/ab.npy.
    with pytest.raises(ConfigError, match=r"a\?\.npy: is a file, not a directory"):
        FileSource(str(root / "i" / "a?.npy"), format="npy")
    assert FileSource([str(root / "i" / "a?.npy")], format="npy").files.keys == [
        str(root / "i" / "a?.npy")
    ]
    src = FileSource(str(root / "i" / "[a]b.npy"), format="npy")
    assert src.files.keys == [str(root / "i" / "ab.npy")]
    assert _values(TableSource(str(root / "t[0].parquet"))) == [OTHER]
    src2 = TokenSource(str(root / "shard[0].bin"), dtype="uint16", context=8)
    assert _values(src2) == [OTHER]


def test_a_pattern_that_matches_nothing_says_how_to_escape(root: Path) -> None:
    for make, error in (
        (lambda: FileSource(str(root / "x[2]" / "*.npy"), format="npy"), ObjectNotFoundError),
        (lambda: TokenSource(str(root / "x[2]*.bin"), dtype="uint16", context=8),
         ObjectNotFoundError),
        (lambda: TableSource(str(root / "x[2]*.parquet")), FormatError),
    ):  # fmt: skip
        with pytest.raises(error) as info:
            make()
        assert "x[2]" in str(info.value) and "'[[]' (glob.escape)" in str(info.value)


def test_literal_parts_escapes_from_the_left_while_the_names_exist(root: Path) -> None:
    exists = os.path.lexists
    sep = os.sep
    got = literal_parts(f"{root}/d[1]/*.npy", exists, sep)
    assert got == (f"{root}/d[[]1]/*.npy", False)
    assert literal_parts(f"{root}/shard[01].bin", exists, sep) == (f"{root}/shard[[]01].bin", True)
    assert literal_parts(f"{root}/d[2]/x[1]", exists, sep) == (f"{root}/d[2]/x[1]", False)
    # Two such parts, both existing: each checked as written (before: the second was
    # checked under the first's escaped name, found missing, and read as a pattern).
    (root / "d[1]" / "s[1].bin").write_bytes(b"")
    got = literal_parts(f"{root}/d[1]/s[1].bin", exists, sep)
    assert got == (f"{root}/d[[]1]/s[[]1].bin", True)
    assert literal_parts(f"{root}/*/a?.npy", exists, sep) == (f"{root}/*/a?.npy", False)
    assert ESCAPE_HINT.startswith("; ")
