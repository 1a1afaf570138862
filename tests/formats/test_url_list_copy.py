"""A worker copy of a source over a list of object URLs opens the listing it is sent
under their root: it names no URL again and holds no str a URL."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from headrace.formats import FileSource


def test_a_copy_of_a_url_list_opens_its_root(tmp_path: Path) -> None:
    # A folder whose name is percent-encoded in its URLs ("%" -> "%25"): decoded once.
    root = tmp_path / "pct%41 x"
    root.mkdir()
    (root / "pctA x").mkdir()  # what a second decoding would name
    for i in range(40):
        (root / f"{i:03d}.bin").write_bytes(bytes([i]) * (i + 1))
        (root / "pctA x" / f"{i:03d}.bin").write_bytes(b"wrong")
    urls = [(root / f"{i:03d}.bin").as_uri() for i in reversed(range(40))]
    assert "%25" in urls[0]
    src = FileSource(urls, format="raw")
    blob = pickle.dumps(src)
    copy = pickle.loads(blob)
    assert copy._args[0] == src.files.url  # the root, not the 40 URLs
    assert blob.count(b"039.bin") == 1  # in the listing's packed keys, not in a URL too
    assert copy.files.url == src.files.url and copy.files.keys == src.files.keys
    assert copy.fingerprint() == src.fingerprint()
    rows = np.arange(40)
    want = [bytes(x) for x in src.read(2, rows)["data"]]
    assert [bytes(x) for x in copy.read(2, rows)["data"]] == want
    assert sorted(want, key=len) == [bytes([i]) * (i + 1) for i in range(40)]
    again = pickle.loads(pickle.dumps(copy))  # a copy's copy
    assert [bytes(x) for x in again.read(2, rows)["data"]] == want
    for s in (src, copy, again):
        s.close()


def test_a_copy_of_a_file_url_prefix_names_its_folder_once(tmp_path: Path) -> None:
    # A folder given as a file:// prefix, percent-encoded ("%" -> "%25"): the copy is sent
    # where the parent's store was opened and must not decode it a second time, which
    # would name the decoy folder beside it.
    root = tmp_path / "pct%41 x"
    (root / "d").mkdir(parents=True)
    (tmp_path / "pctA x" / "d").mkdir(parents=True)
    for i in range(12):
        (root / "d" / f"{i:03d}.bin").write_bytes(bytes([i]) * (i + 1))
        (tmp_path / "pctA x" / "d" / f"{i:03d}.bin").write_bytes(b"wrong")
    prefix = (root / "d").as_uri() + "/"
    assert "%25" in prefix
    src = FileSource(prefix, format="raw")
    rows = np.arange(12)
    want = [bytes(x) for x in src.read(1, rows)["data"]]
    assert sorted(want, key=len) == [bytes([i]) * (i + 1) for i in range(12)]
    copy = pickle.loads(pickle.dumps(src))
    again = pickle.loads(pickle.dumps(copy))
    for c in (copy, again):
        assert c.files.keys == src.files.keys and c.fingerprint() == src.fingerprint()
        assert [bytes(x) for x in c.read(1, rows)["data"]] == want
    for s in (src, copy, again):
        s.close()
