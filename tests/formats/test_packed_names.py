"""A file listing held packed (``PackedNames``, an ``int64`` array of sizes, ``PackedTags``):
the same names, batches, sample keys and fingerprints as the lists it replaced, and a
worker copy that carries arrays, not a ``str`` a file."""

from __future__ import annotations

import multiprocessing
import pickle
import pickletools
from pathlib import Path

import numpy as np
import pytest

from _packed_listing import (
    NAMES,
    OLD_DIGEST,
    OLD_FINGERPRINT,
    OLD_STATE,
    first_digest,
    npy_source,
    write_names,
)
from headrace.errors import DataError, StorageError
from headrace.formats import FileSource
from headrace.formats._file_list import list_files
from headrace.formats._packed_names import PackedNames, PackedSizes, PackedTags
from headrace.pipeline import Loader
from headrace.plan import fingerprint_digest
from headrace.testing import batch_digest


# -- the type ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "names",
    [[], ["one"], ["", "é", "日本/x", "\udcff.npy", "z" * 300], [f"k{i:04d}" for i in range(50)]],
    ids=["empty", "one", "odd", "fifty"],
)
def test_packed_names_read_as_the_list_they_were_made_of(names: list[str]) -> None:
    p = PackedNames.of(names)
    assert len(p) == len(names) and list(p) == names and p == names
    assert [p[i] for i in range(len(names))] == names
    assert [p[-i] for i in range(1, len(names) + 1)] == [
        names[-i] for i in range(1, len(names) + 1)
    ]
    for cut in (slice(1, 4), slice(None, 2), slice(3, None), slice(None, None, 3), slice(5, 2)):
        assert isinstance(p[cut], PackedNames) and list(p[cut]) == names[cut]
    back = pickle.loads(pickle.dumps(p, protocol=5))
    assert back == p and list(back) == names
    # Ends of 4 GiB of names and more are int64: read alike.
    wide = PackedNames(np.frombuffer("".join(names).encode("utf-8", "surrogatepass"), np.uint8),
                       np.cumsum([len(n.encode("utf-8", "surrogatepass")) for n in names],
                                 dtype=np.int64))  # fmt: skip
    assert list(wide) == names and list(wide[1:3]) == names[1:3]
    # (the name "\udcff.npy" is what os.fsdecode gives a file named with byte 0xFF)
    with pytest.raises(IndexError, match=f"out of range \\({len(names)} names\\)"):
        p[len(names)]
    if names:
        assert p.index(names[-1]) == len(names) - 1 and names[0] in p


def test_packed_names_pickle_two_arrays_out_of_band_not_a_str_a_name() -> None:
    names = [f"train/n01440764/n01440764_{i}.JPEG" for i in range(1000)]
    buffers: list[pickle.PickleBuffer] = []
    blob = pickle.dumps(PackedNames.of(names), protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 2  # the UTF-8 bytes and the ends
    assert b"n01440764_999" not in blob and len(blob) < 500
    back = pickle.loads(blob, buffers=buffers)
    assert list(back) == names


def test_packed_tags_keep_a_missing_etag_as_none() -> None:
    tags = ['"abc"', None, 'W/"x"', "", None]
    t = PackedTags.of(tags)
    assert list(t) == tags and t == tags and [t[i] for i in range(5)] == tags
    assert list(t[1:4]) == tags[1:4]
    assert list(pickle.loads(pickle.dumps(t, protocol=5))) == tags
    assert PackedTags.of(["a", "b"]) == ["a", "b"] and list(PackedTags.of([])) == []


def test_packed_sizes_read_as_ints_and_as_an_array() -> None:
    sizes = PackedSizes.of([3, 2**40, 0])
    assert sizes == [3, 2**40, 0] and list(sizes) == [3, 2**40, 0] and sizes[1] == 2**40
    assert type(sizes[0]) is int and type(max(sizes)) is int  # as a config takes them
    assert np.asarray(sizes) is sizes.array and sizes.array.dtype == np.int64
    assert np.asarray(sizes, dtype=np.float64).tolist() == [3.0, 2.0**40, 0.0]
    assert sizes[1:] == [2**40, 0] and sum(sizes) == 3 + 2**40
    assert pickle.loads(pickle.dumps(sizes, protocol=5)) == sizes
    with pytest.raises(ValueError, match="read-only"):
        sizes.array[0] = 1


def test_a_listing_of_unequal_columns_is_refused() -> None:
    from headrace.formats._file_list import packed

    with pytest.raises(ValueError, match="2 keys, 1 sizes, 2 ETags"):
        packed((["a", "b"], [1], [None, None]))


# -- a FileSource on real files ---------------------------------------------------------
def test_batches_fingerprint_and_a_state_saved_before_are_unchanged(tmp_path: Path) -> None:
    write_names(tmp_path)
    src = npy_source(tmp_path)
    assert isinstance(src.files.keys, PackedNames) and isinstance(src.files.etags, PackedTags)
    assert src.files.keys == sorted(NAMES) and isinstance(src.files.sizes, PackedSizes)
    assert first_digest(src) == OLD_DIGEST
    assert fingerprint_digest(src.fingerprint()) == OLD_FINGERPRINT
    with Loader(src, batch_size=3, seed=11) as ld:  # the old state resumes exactly
        it = iter(ld)
        whole = [next(it) for _ in range(8)]
    with Loader(src, batch_size=3, seed=11) as ld:
        ld.load_state_dict(dict(OLD_STATE))
        it = iter(ld)
        assert batch_digest(next(it) for _ in range(3)) == batch_digest(whole[5:])
    src.close()


def test_sample_keys_name_non_ascii_files(tmp_path: Path) -> None:
    write_names(tmp_path)
    src = npy_source(tmp_path)
    got = src.sample_keys(np.arange(src.samples_per_epoch))
    assert got[:3] == ["a/plain_00.npy[0]", "a/plain_01.npy[0]", "a/plain_01.npy[1]"]
    assert got[-3:] == ["ä/é1.npy[0]", "ä/é1.npy[1]", "ä/é1.npy[2]"]
    assert "b/日本.npy[3]" in got and len(got) == src.samples_per_epoch == 21
    src.close()


def test_one_file_and_a_list_of_paths(tmp_path: Path) -> None:
    write_names(tmp_path, ["only/é.npy"])
    one = npy_source(tmp_path)
    assert list(one.files.keys) == ["only/é.npy"] and one.files.sizes == [136]
    paths = [str(tmp_path / "only" / "é.npy")]
    listed = npy_source(paths)
    assert listed.files.keys == paths and listed.files.url == ""
    # Names below their common folder, as the lists gave them.
    assert listed.fingerprint()["keys"] == ["é.npy"]
    assert first_digest(one, 2) == first_digest(listed, 2)
    one.close()
    listed.close()


def test_an_empty_folder_is_refused_as_before(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"no files ending in \['.npy'\] under it"):
        npy_source(tmp_path)


def test_a_worker_copy_equals_its_parent_and_reads_the_same_batches(tmp_path: Path) -> None:
    write_names(tmp_path)
    src = npy_source(tmp_path)
    copy = pickle.loads(pickle.dumps(src))
    for a, b in ((copy.files, src.files),):
        assert a.keys == b.keys and a.etags == b.etags
        assert a.sizes == b.sizes and a.sizes.array.dtype == np.int64
    assert first_digest(copy) == OLD_DIGEST
    copy.close()
    src.close()


def _worker_digest(src: FileSource) -> tuple[str, list[str]]:
    return first_digest(src), list(src.files.keys)


def test_a_forkserver_worker_reads_what_its_parent_listed(tmp_path: Path) -> None:
    write_names(tmp_path)
    src = npy_source(tmp_path)
    with multiprocessing.get_context("forkserver").Pool(1) as pool:
        digest, keys = pool.apply(_worker_digest, (src,))
    assert digest == OLD_DIGEST and keys == sorted(NAMES)
    src.close()


def test_a_file_changed_after_listing_is_still_refused_by_name(tmp_path: Path) -> None:
    write_names(tmp_path)
    files = list_files(tmp_path, extensions=(".npy",))
    (tmp_path / "b" / "日本.npy").write_bytes(b"short")
    with pytest.raises(StorageError, match=r"b/日本.npy: truncated or changed object: got 5"):
        files.fetch(3)
    assert "files" in repr(files) and "b/日本.npy" not in repr(files)
    files.close()


def test_a_list_of_paths_travels_once_packed_to_a_worker_copy(tmp_path: Path) -> None:
    # The list as given travelled as a list of str beside the packed keys, and was held
    # so in each worker: now the copy's paths are its keys, packed.
    write_names(tmp_path)
    paths = [str(tmp_path / n) for n in reversed(NAMES)]
    src = npy_source(paths)
    blob = pickle.dumps(src)
    pickled = [a for op, a, _ in pickletools.genops(blob) if op.name.endswith("UNICODE")]
    assert not [s for s in pickled if "plain_0" in s or "日本" in s]
    copy = pickle.loads(blob)
    assert copy.files.keys == sorted(paths) and copy.fingerprint() == src.fingerprint()
    assert first_digest(copy) == first_digest(src)
    again = pickle.loads(pickle.dumps(copy))  # a copy of a copy: the same files
    assert again.files.keys == sorted(paths) and first_digest(again) == first_digest(src)
    for s in (src, copy, again):
        s.close()
