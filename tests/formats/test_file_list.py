"""How FileSource lists local datasets: symbolic links, iterables of paths, patterns."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError, DataError, ObjectNotFoundError
from headrace.formats import FileSource, TokenSource


def _npy(path: Path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, np.full(3, value, dtype=np.int16))


def _values(src: FileSource) -> list[int]:
    n = src.samples_per_epoch
    batch = src.read(0, np.arange(n, dtype=np.int64))
    return [int(v) for v in batch["data"][np.argsort(batch["index"]), 0]]


def test_a_linked_folder_and_a_linked_file_are_listed_as_their_targets(tmp_path: Path) -> None:
    # A class folder kept on another disk and linked in (ln -s /disk2/cat train/cat) is
    # part of the dataset: rglob walked past it, so its files were silently left out.
    elsewhere = tmp_path / "elsewhere"
    for i in range(3):
        _npy(elsewhere / "cat" / f"{i}.npy", 10 + i)
    _npy(elsewhere / "one.npy", 99)
    root = tmp_path / "train"
    _npy(root / "dog" / "0.npy", 0)
    os.symlink(elsewhere / "cat", root / "cat")
    os.symlink(elsewhere / "one.npy", root / "dog" / "1.npy")
    src = FileSource(root, format="npy", shuffle="none")
    assert src.files.keys == ["cat/0.npy", "cat/1.npy", "cat/2.npy", "dog/0.npy", "dog/1.npy"]
    assert _values(src) == [10, 11, 12, 0, 99]
    # The same as the files copied in: a resumed run may move between the two.
    copy = tmp_path / "copy"
    for k, v in zip(src.files.keys, [10, 11, 12, 0, 99], strict=True):
        _npy(copy / k, v)
    assert FileSource(copy, format="npy", shuffle="none").fingerprint() == src.fingerprint()


def test_a_dangling_link_is_named_not_skipped(tmp_path: Path) -> None:
    root = tmp_path / "train"
    _npy(root / "0.npy", 0)
    os.symlink(tmp_path / "gone.npy", root / "1.npy")
    with pytest.raises(ObjectNotFoundError, match=r"1\.npy: a symbolic link to .*gone\.npy"):
        FileSource(root, format="npy")
    # One that does not end in the format's extension is none of the dataset's business.
    os.remove(root / "1.npy")
    os.symlink(tmp_path / "gone.txt", root / "notes.txt")
    assert FileSource(root, format="npy").files.keys == ["0.npy"]


def test_a_link_back_up_the_tree_is_refused_by_name(tmp_path: Path) -> None:
    # Followed, it would list the same files again and again (until paths get too long).
    root = tmp_path / "train"
    _npy(root / "a" / "0.npy", 0)
    os.symlink(root, root / "a" / "loop")
    with pytest.raises(ConfigError, match=r"a/loop: a symbolic link to .*train, a folder above it"):
        FileSource(root, format="npy")


def test_two_links_to_one_folder_list_its_files_under_both_names(tmp_path: Path) -> None:
    # Linked twice on purpose (oversampling a class): both names, as a copy would give.
    _npy(tmp_path / "rare" / "0.npy", 7)
    root = tmp_path / "train"
    _npy(root / "common" / "0.npy", 1)
    os.symlink(tmp_path / "rare", root / "rare1")
    os.symlink(tmp_path / "rare", root / "rare2")
    src = FileSource(root, format="npy", shuffle="none")
    assert src.files.keys == ["common/0.npy", "rare1/0.npy", "rare2/0.npy"]


def test_a_generator_of_paths_is_read_whole(tmp_path: Path) -> None:
    # FileSource(root.glob("*.npy")): the generator was used up by a look for URLs in it,
    # and the source then said "the list of files is empty".
    for i in range(4):
        _npy(tmp_path / f"{i}.npy", i)
    src = FileSource(tmp_path.glob("*.npy"), format="npy", shuffle="none")
    assert len(src.files) == 4
    assert _values(src) == [0, 1, 2, 3]
    src = FileSource(iter([str(tmp_path / "1.npy"), str(tmp_path / "3.npy")]), format="npy")
    assert len(src.files) == 2


def test_a_glob_pattern_lists_what_it_matches_as_a_list_would(tmp_path: Path) -> None:
    # As Table.open takes one; it used to be "no such directory".
    for i in range(3):
        _npy(tmp_path / "d" / f"{i}.npy", i)
    _npy(tmp_path / "d" / "sub" / "9.npy", 9)
    src = FileSource(str(tmp_path / "d" / "*.npy"), format="npy", shuffle="none")
    assert _values(src) == [0, 1, 2]
    listed = FileSource([tmp_path / "d" / f"{i}.npy" for i in range(3)], format="npy")
    assert src.fingerprint() == {**listed.fingerprint(), "shuffle": "none"}
    deep = FileSource(tmp_path / "d" / "**" / "*.npy", format="npy", shuffle="none")
    assert _values(deep) == [0, 1, 2, 9]
    with pytest.raises(ObjectNotFoundError, match=r"\*\.png: no files match this glob pattern"):
        FileSource(str(tmp_path / "d" / "*.png"), format="png")
    # A folder that exists under such a name is a folder.
    odd = tmp_path / "odd[1]"
    _npy(odd / "0.npy", 0)
    assert FileSource(odd, format="npy").files.url == str(odd)


def test_an_empty_folder_says_what_it_looked_for_and_what_it_holds(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("not a sample")
    with pytest.raises(
        DataError, match=r"no files ending in \['\.npy'\] under it; it holds 1 \.txt$"
    ):
        FileSource(tmp_path, format="npy")
    # A microscope's or a scanner's TIFFs: said, with what to do (fails before: only "no
    # files ending in ['.png'] under it").
    for i in range(3):
        (tmp_path / f"s{i}.TIF").write_bytes(b"II*\x00" + bytes(8))
    with pytest.raises(DataError, match=r"it holds 3 \.tif, 1 \.txt; TIFF is not decoded .*PNG"):
        FileSource(tmp_path, format="png")


def test_every_case_and_spelling_of_an_extension_is_listed(tmp_path: Path) -> None:
    # .jpe and .jfif (Windows' and some cameras' names for JPEG files) were left out of a
    # folder's listing, silently (fails before: 3 of the 6 JPEGs listed).
    from headrace.formats import write_sample_file

    img = np.full((4, 5, 3), 7, np.uint8)
    names = ["a.JPG", "b.jpe", "c.jfif", "d.JPEG", "e.Jpg", "f.JFIF"]
    for n in names:
        write_sample_file("jpeg", tmp_path / n, img)
    write_sample_file("png", tmp_path / "g.PNG", img)
    np.save(tmp_path / "h.npy", img)
    (tmp_path / "h.npy").rename(tmp_path / "H.NPY")
    src = FileSource(tmp_path, format="jpeg")
    assert src.files.keys == names
    assert src.read(0, np.arange(6))["image"].shape == (6, 4, 5, 3)
    assert FileSource(tmp_path, format="png").files.keys == ["g.PNG"]
    assert FileSource(tmp_path, format="npy").files.keys == ["H.NPY"]


def test_links_that_circle_through_two_folders_are_refused(tmp_path: Path) -> None:
    # a/to_b -> b and b/to_a -> a: neither is above the other, yet a walk never ends.
    _npy(tmp_path / "a" / "0.npy", 0)
    _npy(tmp_path / "b" / "0.npy", 1)
    os.symlink(tmp_path / "b", tmp_path / "a" / "to_b")
    os.symlink(tmp_path / "a", tmp_path / "b" / "to_a")
    root = tmp_path / "train"
    root.mkdir()
    os.symlink(tmp_path / "a", root / "a")
    with pytest.raises(ConfigError, match=r"to_a: a symbolic link to .*a, a folder above it"):
        FileSource(root, format="npy")


def test_a_worker_copy_reads_the_files_its_parent_listed(tmp_path: Path) -> None:
    # A worker's copy (pickled) must not list again: a file added since would give it
    # another plan than its parent's. A generator cannot be pickled at all.
    import pickle

    for i in range(3):
        _npy(tmp_path / f"{i}.npy", i)
    made = [
        FileSource(tmp_path.glob("*.npy"), format="npy", shuffle="none"),
        FileSource(str(tmp_path / "*.npy"), format="npy", shuffle="none"),
    ]
    _npy(tmp_path / "3.npy", 3)
    for src in made:
        copy = pickle.loads(pickle.dumps(src))
        assert copy.files.keys == src.files.keys
        assert _values(copy) == [0, 1, 2]


def test_file_uris_as_path_as_uri_writes_them(tmp_path: Path) -> None:
    # Path.as_uri() (and every URI writer) percent-encodes: file:///data/my%20set. The
    # store took the path as written, so a folder with a space or an accent was "not one".
    root = tmp_path / "my set é"
    for name in ("a b.npy", "ü.npy", "c.npy"):
        _npy(root / name, len(name))
    plain = FileSource(root, format="npy", shuffle="none")
    urls = [p.as_uri() for p in root.iterdir()]
    local = "file://localhost" + str(root)  # RFC 8089's other spelling of this machine
    for files in (root.as_uri(), "file://" + str(root), urls, local):
        src = FileSource(files, format="npy", shuffle="none")
        assert src.files.keys == ["a b.npy", "c.npy", "ü.npy"], files
        assert _values(src) == _values(plain)
        assert src.fingerprint() == plain.fingerprint()
        src.close()
    # A name with a literal '%' in it, written as it is, is still that name.
    odd = tmp_path / "100%41"
    _npy(odd / "0.npy", 5)
    assert _values(FileSource("file://" + str(odd), format="npy")) == [5]


def test_a_file_uri_of_a_percent_name_is_decoded_once(tmp_path: Path) -> None:
    # Path.as_uri() writes the folder 100%41 as 100%2541: decoded once, it names 100%41;
    # the store of a list of such URLs (and a token file's) decoded it again, and read
    # the folder 100A where one exists: another folder's files, without a word.
    odd, other = tmp_path / "100%41", tmp_path / "100A"
    for folder, v in ((odd, 5), (other, 9)):
        _npy(folder / "0.npy", v)
        np.full(64, v, np.uint16).tofile(folder / "t.bin")
    assert _values(FileSource([(odd / "0.npy").as_uri()], format="npy")) == [5]
    assert _values(FileSource(odd.as_uri(), format="npy")) == [5]
    tokens = TokenSource((odd / "t.bin").as_uri(), dtype="uint16", context=8)
    assert set(tokens.read(0, np.arange(tokens.samples_per_epoch))["x"].ravel()) == {5}


def test_a_file_listed_twice_is_refused_naming_both_spellings(tmp_path: Path) -> None:
    # A list joined from overlapping globs read the repeated file twice an epoch, silently
    # (TokenSource refused it; FileSource and Table did not).
    for i in range(2):
        _npy(tmp_path / f"{i}.npy", i)
    a, b = str(tmp_path / "0.npy"), str(tmp_path / "1.npy")
    for twice in (a, f"{tmp_path}/./0.npy", f"{tmp_path}/../{tmp_path.name}/0.npy"):
        with pytest.raises(ConfigError, match=r"0\.npy: listed twice \(as .*0\.npy and .*Mixture"):
            FileSource([a, b, twice], format="npy")
    assert _values(FileSource([b, a], format="npy", shuffle="none")) == [0, 1]


def test_files_of_another_format_beside_are_counted_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A folder of .npy samples that also holds .npz ones: format="npy" read the .npy files
    # and left the others out without a word (a dataset partly read, silently).
    root = tmp_path / "train"
    for i in range(3):
        _npy(root / "a" / f"{i}.npy", i)
    (root / "b").mkdir()
    for i in range(2):
        np.savez(root / "b" / f"{i}.npz", x=np.full(4, 10 + i))
    (root / "notes.txt").write_text("not a format: not counted")
    with caplog.at_level("WARNING", logger="headrace"):
        src = FileSource(root, format="npy", shuffle="none")
    assert _values(src) == [0, 1, 2]
    said = (
        "left out 2 file(s) of another format (e.g. 'b/0.npz'): this source reads the files "
        "ending in ['.npy']; read the others with a FileSource of their own (format='npz')"
    )
    assert src.files.other == 2 and said in repr(src.files) and said in caplog.text
    # The other source reads them, and says the same of the .npy files.
    assert FileSource(root, format="npz").files.keys == ["b/0.npz", "b/1.npz"]
    assert "left out 3 file(s) of another format (e.g. 'a/0.npy')" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="headrace"):  # raw reads every file: none left
        assert FileSource(root, format="raw").files.other == 0
    assert "another format" not in caplog.text


def _appledouble(path: Path) -> None:
    """What macOS writes beside a file copied to a disk or share without its metadata."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        " + bytes(4000))


def test_hidden_files_and_folders_are_left_out_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A folder copied from a Mac holds ._x.npy beside each x.npy (AppleDouble, not NPY):
    # listed as samples, the first batch to reach one failed ("not an NPY file") or, with
    # format="raw", trained on Finder metadata (fails before: 7 keys).
    root = tmp_path / "train"
    for i in range(3):
        _npy(root / "cat" / f"{i}.npy", i)
        _appledouble(root / "cat" / f"._{i}.npy")
    _npy(root / ".ipynb_checkpoints" / "0-checkpoint.npy", 99)
    (root / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")  # not .npy: not counted
    with caplog.at_level("WARNING", logger="headrace"):
        src = FileSource(root, format="npy", shuffle="none")
    assert src.files.keys == ["cat/0.npy", "cat/1.npy", "cat/2.npy"]
    assert _values(src) == [0, 1, 2]
    assert (src.files.hidden, src.files.hidden_example) == (4, ".ipynb_checkpoints/")
    assert "skipped 4 hidden file(s) or folder(s)" in repr(src)
    assert "skipped 4 hidden" in repr(src.files) and "skipped 4 hidden" in caplog.text
    # raw reads any name: the same rule.
    assert FileSource(root, format="raw").files.keys == src.files.keys
    # Asked for by name, a hidden file is read (a list of paths is read as given).
    listed = FileSource([root / "cat" / "0.npy", root / "cat" / "._0.npy"], format="raw")
    assert listed.files.hidden == 0 and len(listed.files) == 2


def test_a_folder_of_hidden_files_only_says_so(tmp_path: Path) -> None:
    root = tmp_path / "train"
    _appledouble(root / "._0.npy")
    with pytest.raises(
        DataError, match=r"no files ending in \['\.npy'\] under it; 1 hidden .*'\._0\.npy'"
    ):
        FileSource(root, format="npy")


def test_fifos_in_a_folder_are_left_out_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A FIFO named like a sample (a tool streaming into x.npy) was left out without a
    # word (fails before: special 0, nothing said), where hidden files are counted.
    root = tmp_path / "train"
    for i in range(2):
        _npy(root / f"{i}.npy", i)
    os.mkfifo(root / "2.npy")
    os.mkfifo(root / "notes.txt")  # not .npy: not counted
    with caplog.at_level("WARNING", logger="headrace"):
        src = FileSource(root, format="npy", shuffle="none")
    assert src.files.keys == ["0.npy", "1.npy"] and _values(src) == [0, 1]
    assert (src.files.special, src.files.special_example) == (1, "'2.npy': a FIFO")
    said = "skipped 1 file(s) that are not regular files (e.g. '2.npy': a FIFO)"
    assert said in repr(src) and said in caplog.text
    # A folder of FIFOs only says so.
    only = tmp_path / "only"
    only.mkdir()
    os.mkfifo(only / "0.npy")
    with pytest.raises(DataError, match=r"no files ending in .*'0\.npy': a FIFO"):
        FileSource(only, format="npy")


def test_a_fifo_in_a_list_or_a_glob_is_refused_by_name(tmp_path: Path) -> None:
    # Listed by name, a FIFO was opened to be read, which waits for a writer: the
    # first read hung for ever (fails before: listed with size 0, no error).
    _npy(tmp_path / "0.npy", 0)
    os.mkfifo(tmp_path / "1.npy")
    for files in ([tmp_path / "0.npy", tmp_path / "1.npy"], str(tmp_path / "*.npy")):
        with pytest.raises(ConfigError, match=r"1\.npy: a FIFO, not a regular file.*for ever"):
            FileSource(files, format="raw")


def test_a_dangling_link_in_a_glob_or_list_is_refused_as_in_a_folder(tmp_path: Path) -> None:
    # A folder's walk refused a dangling link by name; a glob dropped it without a word
    # (fails before: 1 file listed), a list said only "no such file".
    _npy(tmp_path / "0.npy", 0)
    os.symlink(tmp_path / "gone" / "1.npy", tmp_path / "1.npy")
    for files in (str(tmp_path / "*.npy"), [tmp_path / "0.npy", tmp_path / "1.npy"], tmp_path):
        with pytest.raises(ObjectNotFoundError, match=r"1\.npy: a symbolic link to .*gone"):
            FileSource(files, format="npy")


def test_a_pattern_leaves_out_the_folders_it_matches_and_a_copy_does_not_glob_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import glob
    import pickle

    for i in range(3):
        _npy(tmp_path / "d" / f"{i}.npy", i)
    _npy(tmp_path / "d" / "sub" / "9.npy", 9)
    src = FileSource(str(tmp_path / "d" / "*"), format="npy", shuffle="none")
    assert src.files.keys == [str(tmp_path / "d" / f"{i}.npy") for i in range(3)]
    # A pattern that matches folders only matches no files.
    with pytest.raises(ObjectNotFoundError, match=r"/\*: no files match this glob pattern"):
        FileSource(str(tmp_path / "*"), format="npy")

    def no_glob(*args: object, **kwargs: object) -> list[str]:
        raise AssertionError("a worker's copy globbed again")

    monkeypatch.setattr(glob, "glob", no_glob)
    copy = pickle.loads(pickle.dumps(src))  # as a worker process gets it
    assert copy.files.keys == src.files.keys and _values(copy) == [0, 1, 2]


def test_stats_go_to_threads_once_slow_and_keep_the_order_and_the_first_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading
    import time

    from headrace.errors import ObjectNotFoundError as NotFound
    from headrace.formats import _file_walk

    paths = []
    for i in range(300):
        p = tmp_path / f"{i:03d}.bin"
        p.write_bytes(b"x" * i)
        paths.append(str(p))
    real = _file_walk.stat_listed
    threads: set[int] = set()
    delay = {"s": 0.0}

    def timed(path: str) -> os.stat_result:
        threads.add(threading.get_ident())
        if delay["s"]:
            time.sleep(delay["s"] * (10 if path.endswith("040.bin") else 1))
        return real(path)

    monkeypatch.setattr(_file_walk, "stat_listed", timed)
    # A batch is slow at 1 ms a stat here (50 us in use): a loaded machine's hiccup
    # must not count as a slow mount.
    monkeypatch.setattr(_file_walk, "_SLOW_STAT_S", 1e-3)
    # Quick stats (memory's): all in this thread, in order.
    assert [s.st_size for s in _file_walk.stat_each(paths)] == list(range(300))
    assert threads == {threading.get_ident()}
    # Slow ones (a mount's, 5 ms): the first batch here, the rest on many threads.
    delay["s"] = 5e-3
    assert [s.st_size for s in _file_walk.stat_each(paths)] == list(range(300))
    assert len(threads) > 2
    # Two files gone: the first in the list's order is named, though the other's stat
    # failed 45 ms sooner (file 40's stat is slow).
    os.remove(paths[40])
    os.remove(paths[100])
    with pytest.raises(NotFound, match=r"040\.bin"):
        list(_file_walk.stat_each(paths))


def test_a_list_may_hold_glob_patterns_as_data_files_do(tmp_path: Path) -> None:
    # Hugging Face's data_files=["a/*.npy", ...]: each pattern's matches in its place
    # (fails before: the pattern was taken for a path, and the error asked "did you
    # mean 'a/2.npy'?").
    for d in ("a", "b"):
        for i in range(3):
            _npy(tmp_path / d / f"{i}.npy", 10 * (d == "b") + i)
    _npy(tmp_path / "a" / "sub" / "9.npy", 9)
    both = FileSource([str(tmp_path / "b" / "*.npy"), tmp_path / "a" / "*"], format="npy")
    assert _values(both) == [0, 1, 2, 10, 11, 12]  # sorted; a/sub/, a folder, left out
    plain = FileSource([tmp_path / d / f"{i}.npy" for d in "ab" for i in range(3)], format="npy")
    assert both.fingerprint() == plain.fingerprint()
    with pytest.raises(ObjectNotFoundError, match=r"c/\*\.npy: no files match this glob"):
        FileSource([tmp_path / "a" / "0.npy", tmp_path / "c" / "*.npy"], format="npy")
    # Patterns that match folders only match no files.
    with pytest.raises(ObjectNotFoundError, match=r"a/s\*: no files match this glob"):
        FileSource([str(tmp_path / "a" / "s*")], format="npy")
    with pytest.raises(ConfigError, match=r"listed twice"):
        FileSource([tmp_path / "a" / "*.npy", tmp_path / "a" / "0.npy"], format="npy")


def test_folders_are_listed_on_threads_once_slow_as_one_after_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ImageNet's 1,000 class folders on a network mount: a listing each, ~2.5 ms at
    # 1 ms a round trip, one after another (os.walk) took 1.5 s for 500 folders.
    import errno
    import threading
    import time

    from headrace.errors import PermissionDeniedError
    from headrace.formats import _file_walk

    root = tmp_path / "d"
    for c in range(40):
        for i in range(3):
            _npy(root / f"c{c:02d}" / f"{i}.npy", 3 * c + i)
    _npy(root / "c05" / "deeper" / "x.npy", 200)
    _npy(root / "c06" / ".cache" / "y.npy", 201)  # a hidden folder: not walked
    _npy(tmp_path / "elsewhere" / "z.npy", 202)
    (root / "c07" / "linked").symlink_to(tmp_path / "elsewhere")  # followed
    real = _file_walk._listed
    threads: set[int] = set()
    delay = {"s": 0.0}
    refuse = {"name": ""}

    def timed(folder: str) -> object:
        threads.add(threading.get_ident())
        time.sleep(delay["s"])
        if refuse["name"] and folder.endswith(refuse["name"]):
            raise PermissionError(errno.EACCES, "Permission denied", folder)
        return real(folder)

    monkeypatch.setattr(_file_walk, "_listed", timed)
    # Quick folders first, slow at 250 ms a folder (200 us in use): a loaded machine's
    # hiccup must not count as a slow mount (at 1 ms one did, in a CI run of 2 cores).
    monkeypatch.setattr(_file_walk, "_SLOW_FOLDER_S", 0.25)
    quick = _file_walk.walk(root, (".npy",))
    assert threads == {threading.get_ident()}
    assert len(quick.keys) == 40 * 3 + 2 and quick.hidden == 1
    assert "c05/deeper/x.npy" in quick.keys and "c07/linked/z.npy" in quick.keys
    monkeypatch.setattr(_file_walk, "_SLOW_FOLDER_S", 1e-3)  # then 5 ms a folder: slow
    delay["s"] = 5e-3
    slow = _file_walk.walk(root, (".npy",))
    assert len(threads) > 2
    assert slow == quick  # keys, sizes, versions, hidden ones: the same listing
    # A folder that cannot be listed is named, as one after another.
    refuse["name"] = "c17"
    with pytest.raises(PermissionDeniedError, match=r"c17: permission denied"):
        _file_walk.walk(root, (".npy",))
    # A link to a folder above it is refused, found on a thread's listing.
    refuse["name"] = ""
    (root / "c30" / "up").symlink_to(root)
    with pytest.raises(ConfigError, match=r"c30/up: a symbolic link to .*, a folder above"):
        _file_walk.walk(root, (".npy",))
