"""Lists of files holding glob patterns: reopened after close(), and with a count each
(session 48)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.formats import FileSource


def _files(tmp_path: Path) -> Path:
    (tmp_path / "x").mkdir()
    np.save(tmp_path / "x" / "b.npy", np.arange(5) + 10)
    np.save(tmp_path / "x" / "a.npy", np.arange(3) + 100)
    np.save(tmp_path / "c.npy", np.arange(2) + 200)
    return tmp_path


@pytest.mark.parametrize("alone", [False, True])
def test_a_url_list_with_a_pattern_reads_on_after_close(tmp_path: Path, alone: bool) -> None:
    # A read after close() opens the listing again: the list's pattern was taken for a
    # URL, its matches' sizes paired with it ("a listing of 1 keys, 2 sizes": ValueError).
    root = _files(tmp_path)
    urls = [(root / "x").as_uri() + "/*.npy"] + ([] if alone else [(root / "c.npy").as_uri()])
    src = FileSource(urls, format="npy", samples_per_file="header")
    rows = np.arange(int(src.counts.sum()))
    want = src.read(0, rows)["data"].ravel().tolist()
    assert sorted(want) == [10, 11, 12, 13, 14, 100, 101, 102, *([] if alone else [200, 201])]
    keys = list(src.files.keys)
    src.close()
    assert src.read(0, rows)["data"].ravel().tolist() == want
    assert list(src.files.keys) == keys
    src.close()


def test_a_url_list_with_a_pattern_matching_one_object_reads_on_after_close(
    tmp_path: Path,
) -> None:
    # One match for one pattern: the lengths agreed, and the pattern was read as a key.
    root = _files(tmp_path)
    src = FileSource([(root / "x").as_uri() + "/a*.npy"], format="npy")
    want = src.read(0, np.arange(1))["data"].tolist()
    src.close()
    assert src.read(0, np.arange(1))["data"].tolist() == want
    src.close()


def test_a_list_holding_a_pattern_takes_a_count_for_each_file_it_matches(
    tmp_path: Path,
) -> None:
    # A list's pattern stands for its matches, as a single pattern does: a count for each
    # file, in the order of src.files.keys. It was "2 counts for the 1 files listed".
    root = _files(tmp_path)
    for given in ([str(root / "x" / "*.npy")], str(root / "x" / "*.npy")):
        src = FileSource(given, format="npy", samples_per_file=[3, 5])
        assert [k.rpartition("/")[2] for k in src.files.keys] == ["a.npy", "b.npy"]
        assert src.counts.tolist() == [3, 5]
        got = sorted(src.read(0, np.arange(8))["data"].ravel().tolist())
        assert got == [10, 11, 12, 13, 14, 100, 101, 102]
        src.close()


def test_a_list_holding_a_pattern_with_too_few_counts_says_what_it_matched(
    tmp_path: Path,
) -> None:
    root = _files(tmp_path)
    given = [str(root / "x" / "*.npy"), str(root / "c.npy")]
    with pytest.raises(ConfigError, match=r"2 counts for the 3 files matched by the list's glob "):
        FileSource(given, format="npy", samples_per_file=[3, 5])


def test_a_list_of_paths_keeps_counts_in_its_own_order(tmp_path: Path) -> None:
    root = _files(tmp_path)
    src = FileSource(
        [str(root / "x" / "b.npy"), str(root / "c.npy"), str(root / "x" / "a.npy")],
        format="npy",
        samples_per_file=[5, 2, 3],
    )
    assert src.counts.tolist() == [2, 3, 5]  # c.npy, x/a.npy, x/b.npy
    src.close()


def test_counts_for_percent_encoded_http_urls_follow_the_names_they_hold() -> None:
    # The listing sorts http(s) URLs by the names they hold ("%7A.npy" is "z.npy", after
    # "b.npy"); the counts were sorted by the URLs as written ("%" before "b"), and each
    # file took the other's count, silently. (No request: the listing is given.)
    from headrace.formats._file_counts import resolve_counts
    from headrace.formats._file_list import list_files
    from headrace.formats._files import FILE_FORMATS

    urls = ["http://127.0.0.1:9/d/%7A.npy", "http://127.0.0.1:9/d/b.npy"]
    files = list_files(urls, listing=(["b.npy", "z.npy"], [10, 10], [None, None]))
    counts, _ = resolve_counts((7, 3), urls, files, FILE_FORMATS["npy"], None, 1)
    assert counts is not None and counts.tolist() == [3, 7]
    files.close()


def test_a_url_list_reopened_names_its_percent_encoded_folder_once(tmp_path: Path) -> None:
    # Reopened where the parent's store was opened: decoded a second time, "pct%2541"
    # would name the decoy folder "pctA" beside it.
    root = tmp_path / "pct%41 x"
    root.mkdir()
    (tmp_path / "pctA x").mkdir()
    for i in range(3):
        (root / f"{i}.bin").write_bytes(bytes([i]) * (i + 1))
        (tmp_path / "pctA x" / f"{i}.bin").write_bytes(b"wrong")
    for urls in (
        [(root / f"{i}.bin").as_uri() for i in range(3)],
        [(root / "0.bin").as_uri(), root.as_uri() + "/[12].bin"],
    ):
        src = FileSource(urls, format="raw")
        want = sorted(bytes(x) for x in src.read(0, np.arange(3))["data"])
        assert want == [b"\x00", b"\x01\x01", b"\x02\x02\x02"]
        src.close()
        assert sorted(bytes(x) for x in src.read(0, np.arange(3))["data"]) == want
        src.close()


def test_a_url_list_holding_a_pattern_takes_a_count_for_each_object_it_matches(
    tmp_path: Path,
) -> None:
    # As a local list's: it was "2 counts for the 1 files listed".
    root = _files(tmp_path)
    src = FileSource([(root / "x").as_uri() + "/*.npy"], format="npy", samples_per_file=[3, 5])
    assert src.counts.tolist() == [3, 5]
    src.close()
    given = [(root / "x").as_uri() + "/*.npy", (root / "c.npy").as_uri()]
    with pytest.raises(ConfigError, match=r"2 counts for the 3 files matched by the list's glob"):
        FileSource(given, format="npy", samples_per_file=[3, 5])
