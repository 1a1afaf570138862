"""NPY files of many samples under shuffle="samples": only the header and the rows a
read asks are read (formats/_npy_ranges.py), and the batches are those of whole files."""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError, FormatError, ObjectNotFoundError, StorageError
from headrace.formats import FileSource
from headrace.formats._kept_maps import KEPT
from headrace.io._resident import drop_pages, resident_ranges
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest


def _save(path: Path, a: np.ndarray, version: tuple[int, int] | None = None) -> None:
    with open(path, "wb") as f:
        np.lib.format.write_array(f, a, version=version, allow_pickle=False)


def _digest(src: FileSource, steps: int = 6, batch: int = 5) -> str:
    with Loader(src, batch_size=batch, seed=3, steps=steps) as loader:
        return batch_digest(loader)


def _pair(root: Path, **kw: Any) -> tuple[FileSource, FileSource]:
    """The source read by rows, and the map-style baseline (each file whole per sample)."""
    kw.setdefault("samples_per_file", "header")
    ranged = FileSource(root, format="npy", shuffle="samples", npy_ranges_above=0, **kw)
    whole = FileSource(root, format="npy", shuffle="samples", mode="map-style", **kw)
    return ranged, whole


def test_samples_read_only_their_rows_with_the_whole_files_batches(tmp_path: Path) -> None:
    # 6 files of 64 samples of 64x64 float32 (1 MiB a file): 8 samples read. Whole,
    # each read fetched every file it touched: about 6 MiB for 128 KiB of samples.
    _random_files(tmp_path, 0, 6, (64, 64, 64))
    ranged, whole = _pair(tmp_path, samples_per_file=64)
    assert ranged._by_rows is not None and whole._by_rows is None
    assert _digest(ranged, steps=2, batch=4) == _digest(whole, steps=2, batch=4)
    row = 64 * 64 * 4
    # 8 rows, each joined with at most a 64 KiB gap, and the headers.
    assert 8 * row <= ranged.stats.bytes <= 8 * (row + (64 << 10)) + 6 * 128
    ranged.close()
    whole.close()


VARIANTS: dict[str, Any] = {
    "float32": np.arange(40 * 6, dtype="<f4").reshape(40, 2, 3),
    "big-endian": np.arange(40 * 6, dtype=">f4").reshape(40, 2, 3),
    "fortran": np.asfortranarray(np.arange(40 * 6, dtype="<f8").reshape(40, 6)),
    "1-d": np.arange(40, dtype="<i8"),
    "structured": np.array(
        [(i, (i, -i, 2 * i)) for i in range(40)], dtype=[("a", "<i4"), ("b", "<f8", (3,))]
    ),
    # A header past the 128 bytes read first: its rows lie after it.
    "long header": np.zeros(40, dtype=[(f"field_{k:02d}", "<u2") for k in range(30)]),
    "bool": np.arange(40 * 3).reshape(40, 3) % 3 == 0,
    "strings": np.array([f"s{i}" * (i % 4) for i in range(40)], dtype="<U8"),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("version", [None, (2, 0), (3, 0)])
def test_npy_variants_read_by_rows_give_the_whole_files_batches(
    tmp_path: Path, name: str, version: tuple[int, int] | None
) -> None:
    base = VARIANTS[name]
    for i in range(4):
        a = base.copy(order="K") if name == "fortran" else base.copy()
        if a.dtype.names is None and a.dtype.kind in "iuf":
            a += 1000 * i
        _save(tmp_path / f"{i}.npy", a[: 40 - 3 * i], version)  # files of 4 lengths
    ranged, whole = _pair(tmp_path)
    assert _digest(ranged) == _digest(whole)
    # And the rows are those np.load gives.
    batch = ranged.read(3, np.arange(30))
    files, items = ranged.file_item(batch["index"])
    want = [np.load(tmp_path / ranged.files.keys[f])[i] for f, i in zip(files, items, strict=True)]
    np.testing.assert_array_equal(batch["data"], np.stack(want))
    ranged.close()
    whole.close()


MIXED: dict[str, list[Any]] = {
    # Another dtype, or another row shape, in one file: a ragged batch, as before.
    "dtypes": [np.zeros((12, 3), "<f4"), np.ones((12, 3), "<f8"), np.ones((12, 3), "<f4")],
    "shapes": [np.zeros((12, 3), "<f4"), np.ones((12, 4), "<f4"), np.ones((12, 3), "<f4")],
    # Both byte orders of float32, or big-endian only: one native float32 batch (np.stack's).
    "big-endian": [
        np.arange(36, dtype=">f4").reshape(12, 3),
        -np.arange(36, dtype=">f4").reshape(12, 3),
    ],
    "byte orders": [
        np.arange(36, dtype="<f4").reshape(12, 3),
        -np.arange(36, dtype=">f4").reshape(12, 3),
    ],
}


@pytest.mark.parametrize("name", sorted(MIXED))
def test_files_that_disagree_give_the_batches_picked_a_sample_at_a_time(
    tmp_path: Path, name: str
) -> None:
    # A read gathers each key from its files at once where they agree; where they do
    # not, the batch is the one stacked a sample at a time (map-style's, here).
    for i, a in enumerate(MIXED[name]):
        _save(tmp_path / f"{i}.npy", a)
    ranged, whole = _pair(tmp_path)
    everything = np.arange(sum(len(a) for a in MIXED[name]))
    got, want = ranged.read(1, everything), whole.read(1, everything)
    assert batch_digest([got]) == batch_digest([want])
    ragged = name in ("dtypes", "shapes")
    assert (got["data"].dtype == object) == ragged
    if not ragged:
        assert got["data"].dtype == np.dtype("=f4")
    ranged.close()
    whole.close()


def test_a_guess_from_a_file_of_the_same_size_that_proves_wrong(tmp_path: Path) -> None:
    # Same size, same header length, other rows: (16, 8) and (8, 16) float32. The first
    # file's layout is the guess for the second; its header corrects it.
    np.save(tmp_path / "0.npy", np.arange(128, dtype=np.float32).reshape(16, 8))
    np.save(tmp_path / "1.npy", -np.arange(128, dtype=np.float32).reshape(8, 16))
    assert os.path.getsize(tmp_path / "0.npy") == os.path.getsize(tmp_path / "1.npy")
    src = FileSource(tmp_path, format="npy", samples_per_file="header", shuffle="samples",
                     npy_ranges_above=0, decode_threads=0, in_flight=1)  # fmt: skip
    for k in range(24):  # every sample, one a read: each file is fetched many times
        b = src.read(0, np.array([k]))
        f, i = src.file_item(b["index"])
        want = np.load(tmp_path / src.files.keys[int(f[0])])[int(i[0])]
        np.testing.assert_array_equal(b["data"][0], want)
    src.close()


def test_files_in_memory_are_read_through_maps_and_others_by_pread(tmp_path: Path) -> None:
    # Rows whose pages are in memory are copied from a map of the file, where a pread
    # would read 1 MiB or more; a file out of memory is read by pread (a map would fault
    # its pages in one at a time), as are a few rows (a map costs more). The same
    # batches each way. Rows of 256 KiB; headers counted first (each file's first read
    # knows its rows).
    _random_files(tmp_path, 5, 4)
    everything, few = np.arange(64), np.arange(3)
    ranged, whole = _pair(tmp_path)
    asks = {"all": everything, "few": few, "reversed": everything[::-1]}
    want = {n: batch_digest([whole.read(3, s)]) for n, s in asks.items()}
    assert batch_digest([ranged.read(3, everything)]) == want["all"]
    assert ranged._by_rows is not None and ranged._by_rows.mapped == 4  # just written
    small, unused = _pair(tmp_path)
    assert batch_digest([small.read(3, few)]) == want["few"]
    assert small._by_rows is not None and small._by_rows.mapped == 0  # < 1 MiB a file
    for s in (ranged, whole, small, unused):
        s.close()  # (and their read-ahead, which would read pages in again)
    for p in tmp_path.iterdir():
        drop_pages(p)
    with open(tmp_path / "0.npy", "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        view = np.frombuffer(m, np.uint8)
        if resident_ranges(view.ctypes.data, np.array([4096]), np.array([4096]))[0]:
            pytest.skip("this filesystem keeps its pages in memory (tmpfs?)")
        del view
        m.close()
    cold, other = _pair(tmp_path)
    # (Not a run of samples: a run's read fetches the next run ahead, from pages read now.)
    assert batch_digest([cold.read(3, everything[::-1])]) == want["reversed"]
    assert cold._by_rows is not None and cold._by_rows.mapped == 0
    cold.close()
    other.close()


def test_rows_read_through_a_map_are_copies_in_a_ragged_batch(tmp_path: Path) -> None:
    # Rows of two widths: a ragged batch holds each row as its own array. Read through
    # a map, those are copies, not views of the map (a file truncated under a batch a
    # model still holds would be SIGBUS at its next touch).
    rng = np.random.default_rng(6)
    np.save(tmp_path / "0.npy", rng.standard_normal((8, 256, 256), dtype=np.float32))
    np.save(tmp_path / "1.npy", rng.standard_normal((8, 256, 128), dtype=np.float32))
    ranged, whole = _pair(tmp_path)
    got = ranged.read(0, np.arange(16))
    assert ranged._by_rows is not None and ranged._by_rows.mapped == 2
    assert batch_digest([got]) == batch_digest([whole.read(0, np.arange(16))])
    assert got["data"].dtype == object
    for row in got["data"]:
        owner = row
        while isinstance(owner, (np.ndarray, memoryview)):
            owner = owner.base if isinstance(owner, np.ndarray) else owner.obj
        assert not isinstance(owner, mmap.mmap)
    ranged.close()
    whole.close()


def _random_files(
    root: Path, seed: int, n: int = 2, shape: tuple[int, ...] = (16, 256, 256)
) -> np.random.Generator:
    """``n`` files ``0.npy``... of random float32 of ``shape`` (by default 16 rows of
    256 KiB: read by rows through a map where in memory); the generator, for more."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        np.save(root / f"{i}.npy", rng.standard_normal(shape, dtype=np.float32))
    return rng


def _in_file(src: FileSource, f: int) -> np.ndarray:
    """The sample numbers (seed 0) that file ``f`` holds, in a random order."""
    samples = np.arange(src.samples_per_epoch)
    files, _ = src.plan.locate(0, samples)
    return np.random.default_rng(0).permutation(samples[files == f])


def test_a_mapped_file_changed_during_or_between_reads_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read through a map, a file is checked before the rows are copied (a file that
    # shrank under a map would be SIGBUS at the copy) and after (written in place
    # during the copy: refused, as a pread's check after the read refuses it).
    rng = _random_files(tmp_path, 7)
    victim = tmp_path / "0.npy"
    # Between reads: the first read's file is kept for the next (its image, its map).
    src, other = _pair(tmp_path)
    ours = _in_file(src, 0)
    src.read(0, ours[:8])
    assert src._by_rows is not None and src._by_rows.mapped >= 1
    os.truncate(victim, os.path.getsize(victim) // 2)
    with pytest.raises(StorageError, match=r"0\.npy: truncated or changed file"):
        src.read(0, ours[8:])
    src.close()
    other.close()
    # During the copy (a rewrite in place, injected as the rows are decoded).
    np.save(victim, rng.standard_normal((16, 256, 256), dtype=np.float32))
    import headrace.formats._file_samples as samples

    decode = samples.decode_npy_rows

    def rewritten(data: Any, **kw: Any) -> Any:
        got = decode(data, **kw)
        st = os.stat(victim)
        os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        return got

    src, other = _pair(tmp_path)
    monkeypatch.setattr(samples, "decode_npy_rows", rewritten)
    with pytest.raises(StorageError, match=r"0\.npy: the file changed since it was listed"):
        src.read(0, _in_file(src, 0)[:8])
    assert src._by_rows is not None and src._by_rows.mapped >= 1
    src.close()
    other.close()


def test_mapped_rows_are_copied_on_the_reading_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rows in memory are a copy from the page cache: handing each file's copy to a
    # decode thread cost more than the copy. A file refused there (truncated between
    # reads) frees its slot as a decode thread's would: the other file reads on.
    import threading

    import headrace.formats._file_samples as samples

    _random_files(tmp_path, 11)
    decode, threads = samples.decode_npy_rows, set()

    def recorded(data: Any, **kw: Any) -> Any:
        threads.add(threading.current_thread().name)
        return decode(data, **kw)

    monkeypatch.setattr(samples, "decode_npy_rows", recorded)
    src, whole = _pair(tmp_path, decode_threads=2)
    asked = np.random.default_rng(0).permutation(32)[:12]
    assert len(set(src.plan.locate(0, asked)[0].tolist())) == 2
    assert batch_digest([src.read(0, asked)]) == batch_digest([whole.read(0, asked)])
    assert src._by_rows is not None and src._by_rows.mapped == 2
    assert threads == {threading.current_thread().name}
    ours = _in_file(src, 0)
    os.truncate(tmp_path / "1.npy", os.path.getsize(tmp_path / "1.npy") // 2)
    with pytest.raises(StorageError, match=r"1\.npy: truncated or changed file"):
        src.read(0, asked[::-1])
    for k in range(4):  # more reads than the window holds files
        got = src.read(0, ours[4 * k : 4 * k + 4])
        assert batch_digest([got]) == batch_digest([whole.read(0, ours[4 * k : 4 * k + 4])])
    src.close()
    whole.close()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("how", ["renamed over", "deleted"])
def test_a_kept_map_is_opened_once_and_dropped_for_a_file_replaced_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    # A file read through a map stays open and mapped for its next visits (each visit
    # opened, mapped and closed it: ~90 us of ~250), but only while it is the file at
    # its path: one renamed over is refused, one deleted named as gone, as when every
    # visit opened it. Closing the source closes what it kept.
    import headrace.formats._file_list as file_list

    rng = _random_files(tmp_path, 9)
    opened: list[int] = []
    local_map = file_list.FileList.local_map

    def counted(self: file_list.FileList, i: int) -> Any:
        opened.append(i)
        return local_map(self, i)

    monkeypatch.setattr(file_list.FileList, "local_map", counted)
    before = _open_fds()
    src, whole = _pair(tmp_path, decode_threads=0, in_flight=1)
    ours, theirs = _in_file(src, 0), _in_file(src, 1)
    for k in range(4):  # each file's rows in turn: 8 visits, one map a file
        for asked in (ours[4 * k : 4 * k + 4], theirs[4 * k : 4 * k + 4]):
            got = src.read(0, asked)
            assert batch_digest([got]) == batch_digest([whole.read(0, asked)])
    assert src._by_rows is not None and src._by_rows.mapped == 8
    assert opened == [0, 1]
    victim = tmp_path / "0.npy"
    if how == "renamed over":
        np.save(tmp_path / "new.npy", rng.standard_normal((16, 256, 256), dtype=np.float32))
        os.replace(tmp_path / "new.npy", victim)
        error: type[Exception] = StorageError
        says = r"0\.npy: the file changed since it was listed"
    else:
        victim.unlink()
        error, says = ObjectNotFoundError, r"0\.npy: no such file now; the file source listed"
    with pytest.raises(error, match=says):
        src.read(0, ours[:4])
    assert opened == [0, 1, 0]  # opened again, not read through the map kept
    src.close()
    whole.close()
    assert _open_fds() == before


def test_a_source_dropped_without_close_keeps_no_map(tmp_path: Path) -> None:
    import gc

    _random_files(tmp_path, 13)
    before = _open_fds()
    src, whole = _pair(tmp_path, decode_threads=0, in_flight=1)
    for f in (0, 1, 0):
        src.read(0, _in_file(src, f)[:8])
    assert src._by_rows is not None
    owner = src._by_rows._owner
    assert set(KEPT.kept(owner)) == {0, 1}
    del src
    gc.collect()
    assert KEPT.kept(owner) == {}
    whole.close()
    assert _open_fds() == before


def test_the_next_reads_rows_of_this_reads_last_file_join_its_fetch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The decoder keeps a read's last file for the next read: the next read's rows of it
    # are fetched with this read's, one fetch, where its decode fetched them again
    # after (a second round trip: GETs on object storage). Rows of 64 KiB, 4 a read:
    # by pread (a map is for 1 MiB or more), none joined with another.
    import headrace.formats._file_list as file_list

    _random_files(tmp_path, 12, 2, (64, 16384))
    fetched: list[int] = []
    local_ranges = file_list.FileList.local_ranges

    def counted(self: file_list.FileList, i: int, reader: Any = None) -> Any:
        fetch = local_ranges(self, i, reader)

        def each(spans: list[tuple[int, int]], buf: np.ndarray) -> None:
            fetched.append(i)
            fetch(spans, buf)

        return each

    monkeypatch.setattr(file_list.FileList, "local_ranges", counted)
    src, whole = _pair(tmp_path, in_flight=1, decode_threads=0)
    first, last = _in_file(src, 0), _in_file(src, 1)
    reads = [np.concatenate([first[:4], last[:4]]), last[4:8]]
    assert src.plan.locate(0, reads[0])[0].tolist() == [0] * 4 + [1] * 4
    src.followed_by(0, reads[1])
    for asked in reads:
        assert batch_digest([src.read(0, asked)]) == batch_digest([whole.read(0, asked)])
    assert fetched == [0, 1]  # the second read's rows came with the first's fetch of 1
    src.close()
    whole.close()


def test_whole_files_in_memory_are_read_through_maps(tmp_path: Path) -> None:
    # A reader of whole files (IterableFiles) asks no rows ahead: a file in memory is
    # mapped whole, each byte counted once, the same batches as the map-style reader's.
    from headrace.formats import IterableFiles

    _random_files(tmp_path, 8, 2, (8, 256, 256))
    ranged, whole = _pair(tmp_path)
    it = IterableFiles(ranged, batch_size=4)
    got = list(it.epoch(0, 0))
    assert ranged._by_rows is not None and ranged._by_rows.mapped == 2
    assert it.stats.amplification == pytest.approx(1.0)
    want = list(IterableFiles(whole, batch_size=4).epoch(0, 0))
    assert batch_digest(got) == batch_digest(want)
    ranged.close()
    whole.close()


def test_resume_is_exact_reading_by_rows(tmp_path: Path) -> None:
    for i in range(3):
        np.save(tmp_path / f"{i}.npy", np.arange(20 * 4, dtype=np.int32).reshape(20, 4) + i)
    src = FileSource(
        tmp_path, format="npy", samples_per_file=20, shuffle="samples", npy_ranges_above=0
    )
    assert_resume_exact(lambda: Loader(src, batch_size=7, seed=1), steps=12, resume_at=range(13))
    src.close()


def test_object_arrays_are_refused_by_name_reading_by_rows(tmp_path: Path) -> None:
    np.save(tmp_path / "0.npy", np.arange(8, dtype=np.float32).reshape(4, 2))
    a = np.empty(4, dtype=object)
    a[:] = [[1], [2, 3], "x", None]
    np.save(tmp_path / "1.npy", a, allow_pickle=True)
    src = FileSource(
        tmp_path, format="npy", samples_per_file=4, shuffle="samples", npy_ranges_above=0
    )
    with pytest.raises(FormatError, match=r"1\.npy: NPY holds Python objects"):
        src.read(0, np.arange(8))
    src.close()


def test_a_file_truncated_after_listing_is_named(tmp_path: Path) -> None:
    for i in range(2):
        np.save(tmp_path / f"{i}.npy", np.zeros((64, 1024), np.float32))
    src = FileSource(
        tmp_path, format="npy", samples_per_file=64, shuffle="samples", npy_ranges_above=0
    )
    src.read(0, np.arange(4))
    os.truncate(tmp_path / "1.npy", 128 + 10 * 4096)
    with pytest.raises(StorageError, match=r"1\.npy"):
        src.read(0, np.arange(128))
    src.close()


def test_a_file_truncated_before_listing_says_what_its_header_says(tmp_path: Path) -> None:
    np.save(tmp_path / "0.npy", np.zeros((8, 4), np.float32))
    np.save(tmp_path / "1.npy", np.zeros((8, 4), np.float32))
    os.truncate(tmp_path / "1.npy", os.path.getsize(tmp_path / "1.npy") - 20)
    src = FileSource(
        tmp_path, format="npy", samples_per_file=8, shuffle="samples", npy_ranges_above=0
    )
    with pytest.raises(FormatError, match=r"1\.npy: truncated: header says 128 data bytes"):
        src.read(0, np.arange(16))
    src.close()


def test_stats_say_the_read_amplification(tmp_path: Path) -> None:
    # Bytes fetched over the bytes the samples read take in their files (fails before:
    # WindowStats had no samples, sample_bytes or amplification).
    rng = np.random.default_rng(2)
    for i in range(4):  # 16 rows of 16 KiB a file
        np.save(tmp_path / f"{i}.npy", rng.standard_normal((16, 64, 64), dtype=np.float32))
    size = os.path.getsize(tmp_path / "0.npy")
    baseline = FileSource(tmp_path, format="npy", samples_per_file=16, mode="map-style")
    _digest(baseline, steps=3, batch=4)
    st = baseline.stats
    assert st.samples == 12 and st.sample_bytes == round(12 * size / 16)
    assert st.amplification == pytest.approx(16.0)  # a whole file for each sample
    ranged = FileSource(
        tmp_path, format="npy", samples_per_file=16, shuffle="samples", npy_ranges_above=0
    )
    _digest(ranged, steps=3, batch=4)
    assert ranged.stats.samples == 12 and 1.0 <= ranged.stats.amplification < 6.0
    from headrace.formats import IterableFiles

    it = IterableFiles(ranged, batch_size=8)
    assert sum(len(b["index"]) for b in it.epoch(0, 0)) == 64
    assert it.stats.amplification == pytest.approx(1.0)  # every file once, all its samples
    for s in (baseline, ranged):
        s.close()


def test_small_files_are_read_whole_by_default_and_the_size_is_checked(tmp_path: Path) -> None:
    # Locally under 3.5 MiB a read by rows cost more than the bytes it saved (page
    # cache: 1 MiB files 1.8-2.6x slower, 3 MiB 1.25x): such files are read whole unless
    # npy_ranges_above says otherwise; from 3.5 MiB (the largest file's size) by rows.
    for i in range(2):
        np.save(tmp_path / f"{i}.npy", np.zeros((16, 1024), np.float32))  # 64 KiB
    assert (
        FileSource(tmp_path, format="npy", samples_per_file=16, shuffle="samples")._by_rows is None
    )
    for rows, by_rows in ((895, False), (896, True)):  # 4 KiB rows: 3.5 MiB + header
        big = tmp_path / "big"
        big.mkdir(exist_ok=True)
        np.save(big / "0.npy", np.zeros((rows, 1024), np.float32))
        auto = FileSource(big, format="npy", samples_per_file=rows, shuffle="samples")
        assert (auto._by_rows is not None) == by_rows, rows
    src = FileSource(tmp_path, format="npy", samples_per_file=16, shuffle="samples",
                     npy_ranges_above=32 << 10)  # fmt: skip
    assert src._by_rows is not None
    for off in (None, 0):  # never by rows: "files" order, or turned off
        assert FileSource(tmp_path, format="npy", samples_per_file=16, npy_ranges_above=off,
                          shuffle="files" if off == 0 else "samples")._by_rows is None  # fmt: skip
    for bad in (-1, "big", True, 1.5):
        with pytest.raises(ConfigError, match=r"npy_ranges_above must be a size in bytes >= 0"):
            FileSource(tmp_path, format="npy", samples_per_file=16, npy_ranges_above=bad)


def test_each_chunk_is_located_once_and_its_batches_are_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A chunk's samples were located three times: by the read before it (its next
    # files), by the loader's prefetch and by its own read.
    from headrace.formats._file_plan import FilePlan

    _random_files(tmp_path, 1, 4, (50, 8))
    kw: dict[str, Any] = {"samples_per_file": 50, "shuffle": "samples", "npy_ranges_above": 0}
    want = _digest(FileSource(tmp_path, format="npy", mode="map-style", **kw), steps=12, batch=8)
    located: list[int] = []
    locate = FilePlan.locate

    def counted(self: FilePlan, seed: int, samples: Any) -> Any:
        located.append(len(samples))
        return locate(self, seed, samples)

    monkeypatch.setattr(FilePlan, "locate", counted)
    src = FileSource(tmp_path, format="npy", **kw)
    with Loader(src, batch_size=8, seed=3, steps=12, chunk_steps=2) as loader:
        assert batch_digest(loader) == want
    # The first chunk is one step (the first batch comes sooner), the last the step left.
    assert located == [8, 16, 16, 16, 16, 16, 8]
    for located_again in src._locate(3, np.arange(16, dtype=np.int64)):
        with pytest.raises(ValueError, match="read-only"):  # (shared by later reads)
            located_again[0] = 1
    src.close()
