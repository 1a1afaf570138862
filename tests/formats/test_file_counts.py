"""FileSource with per-file sample counts: a list of counts, or counts read from headers."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _count_files import COUNTS, FORMAT, dataset, rows, write
from headrace.errors import ConfigError, DataError, FormatError, StateError
from headrace.formats import FilePlan, FileSource, IterableFiles, sample_digests
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest


def source(root: Path, kind: str, spf: Any = "header", **kw: Any) -> FileSource:
    opts: dict[str, Any] = {"datasets": ("x", "y")} if kind == "hdf5" else {}
    return FileSource(root, format=FORMAT.get(kind, kind), samples_per_file=spf, **opts, **kw)


def digest(src: FileSource, *, steps: int = 14, batch: int = 4, **kw: Any) -> str:
    with Loader(src, batch_size=batch, seed=5, steps=steps, **kw) as loader:
        return batch_digest(loader)


def key(b: dict[str, np.ndarray]) -> str:
    return "data" if "data" in b else "x"


# -- the plan -------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    files=st.integers(1, 30),
    count=st.integers(1, 6),
    shuffle=st.sampled_from(["files", "samples", "none"]),
    seed=st.integers(0, 2**40),
)
def test_uniform_counts_plan_exactly_as_the_fixed_count(
    files: int, count: int, shuffle: Any, seed: int
) -> None:
    fixed = FilePlan(num_files=files, samples_per_file=count, shuffle=shuffle)
    counted = FilePlan(num_files=files, counts=[count] * files, shuffle=shuffle)
    samples = np.arange(3 * files * count)  # three epochs
    for a, b in zip(fixed.locate(seed, samples), counted.locate(seed, samples), strict=True):
        np.testing.assert_array_equal(a, b)
    index = np.arange(files * count)
    for a, b in zip(fixed.file_item(index), counted.file_item(index), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shuffle", ["files", "samples", "none"])
def test_counts_plan_covers_every_sample_once_per_epoch(shuffle: Any) -> None:
    plan = FilePlan(num_files=len(COUNTS), counts=COUNTS, shuffle=shuffle)
    n = sum(COUNTS)
    assert plan.samples_per_epoch == n
    epochs = []
    for e in range(3):
        f, i = plan.locate(9, np.arange(e * n, e * n + n))
        assert sorted(zip(f.tolist(), i.tolist(), strict=True)) == [
            (fi, k) for fi, c in enumerate(COUNTS) for k in range(c)
        ]
        index = plan.index(f, i)
        assert sorted(index.tolist()) == list(range(n))
        back = plan.file_item(index)
        assert np.array_equal(back[0], f) and np.array_equal(back[1], i)
        epochs.append((f.tolist(), i.tolist()))
        if shuffle == "files":  # a file's items stay together, in the epoch's file order
            runs = [fi for k, fi in enumerate(f.tolist()) if k == 0 or f[k - 1] != fi]
            order = plan.file_order(9, e).tolist()
            assert runs == [fi for fi in order if COUNTS[fi]]
    assert (epochs[0] == epochs[1]) == (shuffle == "none")
    assert [plan.start(f) for f in range(len(COUNTS))] == np.cumsum([0, *COUNTS[:-1]]).tolist()


def test_plan_refuses_bad_counts() -> None:
    with pytest.raises(ConfigError, match="counts has 2 entries for 3 files"):
        FilePlan(num_files=3, counts=[1, 2])
    with pytest.raises(ConfigError, match=r"file 1 has -1"):
        FilePlan(num_files=2, counts=[1, -1])
    with pytest.raises(ConfigError, match="hold no sample"):
        FilePlan(num_files=2, counts=[0, 0])
    with pytest.raises(ConfigError, match="index 28 is out of range for 28 samples"):
        FilePlan(num_files=len(COUNTS), counts=COUNTS).file_item(np.array([3, 28]))


# -- reading ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["npy", "npz", "npzc", "hdf5"])
def test_uniform_counts_give_the_fixed_counts_batches(tmp_path: Path, kind: str) -> None:
    root = dataset(tmp_path / kind, kind, [3] * 7)
    for shuffle in ("files", "samples"):
        fixed = digest(source(root, kind, 3, shuffle=shuffle))
        assert digest(source(root, kind, [3] * 7, shuffle=shuffle)) == fixed
        assert digest(source(root, kind, "header", shuffle=shuffle)) == fixed
    # The same fingerprint: a state saved under one resumes under the others.
    with Loader(source(root, kind, 3), batch_size=4, seed=5, steps=14) as ld:
        it = iter(ld)
        for _ in range(6):
            next(it)
        state = ld.state_dict()
        rest = [batch_digest([b]) for b in it]
    with Loader(source(root, kind, "header"), batch_size=4, steps=14) as ld:
        ld.load_state_dict(state)
        assert [batch_digest([b]) for b in ld] == rest


@pytest.mark.parametrize("kind", ["npy", "npz", "npzc", "hdf5"])
def test_every_sample_is_its_files_row(tmp_path: Path, kind: str) -> None:
    root = dataset(tmp_path / kind, kind)
    src = source(root, kind)
    assert src.counts.tolist() == COUNTS and src.samples_per_epoch == sum(COUNTS)
    assert src.count_stats is not None and src.count_stats.files == len(COUNTS)
    n = sum(COUNTS)
    with Loader(src, batch_size=4, seed=2, steps=3 * n // 4) as loader:
        batches = list(loader)
    for e in range(3):
        seen = np.concatenate([b["index"] for b in batches])[e * n : e * n + n]
        assert sorted(seen.tolist()) == list(range(n))
    for b in batches:
        f, i = src.file_item(b["index"])
        want = (1000 * f + i).astype(np.float32)
        np.testing.assert_array_equal(b[key(b)][:, 0, 0], want)
        assert b[key(b)].shape[1:] == (2, 3)  # a file of one sample too: its row
        if "y" in b:
            np.testing.assert_array_equal(b["y"], want.astype(np.int64))
    assert not any(2 in src.file_item(b["index"])[0] for b in batches)  # holds none


def test_modes_windows_hosts_and_workers_agree(tmp_path: Path) -> None:
    root = dataset(tmp_path / "d", "npz")
    ref = digest(source(root, "npz"), chunk_steps=3)
    for opts in (
        {"mode": "map-style"},
        {"in_flight": 1, "decode_threads": 0},
        {"in_flight": 3, "decode_threads": 2},
        {"speculate": False, "in_flight": 2},
    ):
        src = source(root, "npz", **opts)
        assert digest(src, chunk_steps=5) == ref
        held = src.in_flight * max(src.files.sizes)
        assert 0 < src.stats.peak_held_bytes <= held  # whole files, at most in_flight
    assert digest(source(root, "npz", COUNTS)) == ref
    # Two hosts: the union of their slices is the global batch.
    with Loader(source(root, "npz"), batch_size=4, seed=5, steps=14) as one:
        whole = [b["index"].tolist() for b in one]
    halves = []
    for rank in range(2):
        with Loader(
            source(root, "npz"), batch_size=4, seed=5, steps=14, rank=rank, world_size=2
        ) as ld:
            halves.append([b["index"].tolist() for b in ld])
    assert [a + b for a, b in zip(*halves, strict=True)] == whole
    # Loader workers each taking every other step.
    parts = []
    for w in range(2):
        with Loader(
            source(root, "npz"), batch_size=4, seed=5, steps=14, step_stride=2, step_offset=w
        ) as ld:
            parts.append([b["index"].tolist() for b in ld])
    assert [parts[t % 2][t // 2] for t in range(14)] == whole


def test_resume_is_exact_across_epochs(tmp_path: Path) -> None:
    root = dataset(tmp_path / "d", "hdf5")
    assert_resume_exact(
        lambda: Loader(source(root, "hdf5", in_flight=3), batch_size=3, seed=4, steps=20),
        steps=20,
        resume_at=[1, 6, 9, 15],  # 28 samples an epoch: epoch 2 begins in step 9
    )


def test_iterable_files_reads_each_sample_once_and_skips_empty_files(tmp_path: Path) -> None:
    root = dataset(tmp_path / "d", "npy")
    src = source(root, "npy")
    got, fetches = [], 0
    for w in range(2):
        it = IterableFiles(src, batch_size=1, worker=w, num_workers=2, in_flight=2)
        got += [d for b in it.epoch(seed=3, epoch=1) for d in sample_digests(b)]
        fetches += it.stats.fetches
    assert fetches == sum(1 for c in COUNTS if c)  # not the file of no sample
    with Loader(source(root, "npy"), batch_size=4, seed=3, steps=7) as ld:
        assert sorted(got) == sorted(d for b in ld for d in sample_digests(b))


def test_counts_are_in_the_fingerprint(tmp_path: Path) -> None:
    root = dataset(tmp_path / "d", "npy")
    with Loader(source(root, "npy"), batch_size=4, seed=1, steps=5) as ld:
        next(iter(ld))
        state = ld.state_dict()
    other = [*COUNTS[:-1], COUNTS[-1] + 1]
    with pytest.raises(StateError, match=r"what differs: samples_per_file\)"):
        Loader(source(root, "npy", other), batch_size=4).load_state_dict(state)
    write(root / "r007.npy", "npy", rows(7, 3))  # a shard rewritten with another length
    with pytest.raises(StateError, match=r"what differs: samples_per_file, sizes\)"):
        Loader(source(root, "npy"), batch_size=4).load_state_dict(state)


def test_a_list_of_counts_follows_the_list_of_files(tmp_path: Path) -> None:
    root = dataset(tmp_path / "d", "npy")
    paths = sorted(str(p) for p in root.iterdir())
    ref = digest(source(root, "npy", COUNTS))
    assert digest(FileSource(paths[::-1], format="npy", samples_per_file=COUNTS[::-1])) == ref
    with pytest.raises(ConfigError, match="has 7 counts for the 8 files listed"):
        FileSource(paths, format="npy", samples_per_file=COUNTS[1:])
    with pytest.raises(ConfigError, match=r"r000\.npy: listed twice"):  # whatever the counts
        FileSource([paths[0], paths[0]], format="npy", samples_per_file=[5, 5])
    with pytest.raises(ConfigError, match=r"has 9 counts for the 8 files under .*r000\.npy"):
        source(root, "npy", [*COUNTS, 1])


def test_a_file_of_no_samples_is_never_read(tmp_path: Path) -> None:
    root = dataset(tmp_path / "d", "npy")
    (root / "r002.npy").write_bytes(b"not an npy file")
    src = source(root, "npy", COUNTS)
    assert digest(src, steps=21) == digest(
        source(dataset(tmp_path / "e", "npy"), "npy", COUNTS), steps=21
    )
    assert src.stats.fetches <= 7 * 3 + 3  # 7 files an epoch (speculation may add a few)


def test_a_file_that_disagrees_with_its_count_is_named(tmp_path: Path) -> None:
    root = dataset(tmp_path / "d", "npz")
    wrong = [*COUNTS[:3], 6, *COUNTS[4:]]
    with pytest.raises(
        DataError, match=r"r003\.npz: 'x' has shape \(7, 2, 3\); expected 6 samples"
    ):
        digest(source(root, "npz", wrong, shuffle="none"), steps=7)
    # "header" reads the first member; the others are checked when the file is decoded.
    np.savez(root / "r004.npz", x=rows(4, 1), y=np.arange(2))
    with pytest.raises(DataError, match=r"r004\.npz: 'y' has shape \(2,\); expected 1 samples"):
        digest(source(root, "npz", shuffle="none"), steps=7)


def test_counts_config_errors(tmp_path: Path) -> None:
    root = dataset(tmp_path / "d", "npy")
    for bad, match in (
        ("headers", 'or "header"'),
        (0, ">= 1"),
        (True, 'or "header"'),
        ([1, -2], r"samples_per_file\[1\] is -2"),
        ([1, 2.5], r"samples_per_file\[1\] is 2.5"),
    ):
        with pytest.raises(ConfigError, match=match):
            FileSource(root, format="npy", samples_per_file=bad)
    with pytest.raises(ConfigError, match="jpeg files hold one sample each"):
        FileSource(root, format="jpeg", samples_per_file="header")
    with pytest.raises(ConfigError, match="decode=False hands over whole files"):
        FileSource(root, format="npy", samples_per_file=COUNTS, decode=False)
    with pytest.raises(ConfigError, match="hold no sample"):
        FileSource(root, format="npy", samples_per_file=[0] * 8)


def _npy_with_header(text: bytes) -> bytes:
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text


@pytest.mark.parametrize(
    ("kind", "name", "content", "match"),
    [
        ("npy", "r001.npy", b"PK\x03\x04junk", r"r001\.npy: not an NPY file"),
        (
            "npy",
            "r001.npy",
            _npy_with_header(b"{'descr': '<f4', 'shape': (3,"),
            "corrupt NPY header",
        ),
        ("npy", "r001.npy", b"\x93NUMPY\x01\x00\xff\x00{'descr'", "header says 255 header bytes"),
        ("npy", "r001.npy", np.float32(3), r"a 0-d array \(shape \(\)\).*samples_per_file=1"),
        # Counted from its header, a cut NPY was planned and failed when a batch reached
        # it, where a cut NPZ or HDF5 file is refused here (fails before: no error).
        ("npy", "r001.npy", "cut 4", r"r001\.npy: truncated: header says \d+ data bytes"),
        ("npz", "r001.npz", b"\x93NUMPY junk", r"r001\.npz: not an NPZ \(zip\) file"),
        ("npz", "r001.npz", "cut", r"r001\.npz: truncated or corrupt NPZ"),
        ("npz", "r001.npz", "json", r"member 'x\.npy' is not an array"),
        ("npz", "r001.npz", "empty", "an NPZ with no arrays"),
        ("hdf5", "r001.h5", b"\x89PNG\r\n\x1a\n" + bytes(600), r"r001\.h5: not an HDF5 file"),
        ("hdf5", "r001.h5", "cut", r"r001\.h5: truncated HDF5 file: \d+ bytes, its superblock"),
        ("hdf5", "r001.h5", "no-y", r"r001\.h5: no dataset 'y'; the file holds \['x'\]"),
        ("hdf5", "r001.h5", "scalar", r"dataset 'x' is a scalar.*shape \(1,\).*samples_per_file=1"),
        ("hdf5", "r001.h5", "disagree", r"different numbers of samples.*'x': 3, 'y': 2"),
    ],
)
def test_a_header_that_cannot_be_counted_is_named(
    tmp_path: Path, kind: str, name: str, content: Any, match: str
) -> None:
    root = dataset(tmp_path / "d", kind)
    path = root / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, np.generic):
        np.save(path, content)
    elif content == "cut":
        path.write_bytes(path.read_bytes()[: os.path.getsize(path) // 2])
    elif content == "cut 4":  # its last 4 bytes
        path.write_bytes(path.read_bytes()[:-4])
    elif content == "json":
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("x.npy", b'{"meta": 1}')
    elif content == "empty":
        zipfile.ZipFile(path, "w").close()
    else:
        with h5py.File(path, "w") as h:
            h["x"] = 3.0 if content == "scalar" else rows(1, 3)
            if content == "disagree":
                h["y"] = np.arange(2)
    with pytest.raises(FormatError, match=match):
        source(root, kind)


def test_npz_counts_the_named_member_and_long_headers(tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    # A structured dtype of many fields: a header over NPY_HEAD bytes, read on.
    dt = np.dtype([(f"field_{k:02d}", "<f4") for k in range(40)])
    for f, c in enumerate([4, 2]):
        np.savez(root / f"r{f}.npz", meta=np.zeros(9), x=np.zeros(c, dtype=dt))
        np.save(root / f"r{f}.npy", np.zeros(c, dtype=dt))
    src = FileSource(root, format="npz", samples_per_file="header", datasets=("x",))
    assert src.counts.tolist() == [4, 2]
    assert FileSource(root, format="npz", samples_per_file="header").counts.tolist() == [9, 9]
    assert FileSource(root, format="npy", samples_per_file="header").counts.tolist() == [4, 2]
    with pytest.raises(FormatError, match=r"r0\.npz: no member\(s\) \['z'\] in NPZ"):
        FileSource(root, format="npz", samples_per_file="header", datasets=("z",))


def test_counting_reads_the_headers_not_the_data(tmp_path: Path) -> None:
    # 300 NPY files of 4 MiB each (sparse: the data is a hole), 1.2 GiB in all. The
    # process's read bytes (/proc/self/io, every thread) show what counting read.
    root = tmp_path / "d"
    root.mkdir()
    lengths = [1000 + f % 7 for f in range(300)]
    for f, c in enumerate(lengths):
        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            head, {"descr": "<f4", "fortran_order": False, "shape": (c, 1024)}
        )
        with open(root / f"s{f:04d}.npy", "wb") as fh:
            fh.write(head.getvalue())
            fh.truncate(len(head.getvalue()) + c * 4096)
    before = _read_bytes()
    src = FileSource(root, format="npy", samples_per_file="header")
    got = _read_bytes() - before
    assert src.counts.tolist() == lengths
    assert src.count_stats is not None
    assert src.count_stats.reads == 300 and src.count_stats.bytes == 300 * 128
    assert got < 300 * 4096, got  # the headers (and directory listings): not 1.2 GiB


def _read_bytes() -> int:
    try:
        with open("/proc/self/io") as fh:
            return int(next(line for line in fh if line.startswith("rchar:")).split()[1])
    except OSError:
        pytest.skip("no /proc/self/io")


def test_a_pickled_copy_keeps_the_counts_without_reading_headers(tmp_path: Path) -> None:
    root = dataset(tmp_path / "d", "npy")
    src = source(root, "npy")
    copy = pickle.loads(pickle.dumps(src))
    assert copy.count_stats is None and copy.counts.tolist() == COUNTS
    assert copy.fingerprint() == src.fingerprint()
    assert batch_digest([copy.read(5, np.arange(28))]) == batch_digest([src.read(5, np.arange(28))])


def test_torch_workers_read_the_counts_they_were_given(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    from headrace import torch as ht

    root = dataset(tmp_path / "d", "npy")
    ref = digest(source(root, "npy"))
    ds = ht.TorchDataset(source(root, "npy"), batch_size=4, seed=5, steps=14)
    batches = [
        {k: v.numpy() for k, v in b.items() if isinstance(v, torch.Tensor)}
        for b in ht.HeadraceDataLoader(ds, num_workers=2)
    ]
    assert batch_digest(batches) == ref


def test_every_header_that_fails_is_named_up_to_a_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first file's error is raised; the others that failed are named in a note, so
    # one run lists them all, and past MOST_FAILED the count stops (later files unread).
    from headrace.formats import _file_counts

    for i in range(6):
        np.save(tmp_path / f"f{i}.npy", np.zeros((3, 2), np.float32))
    for i in (1, 2, 4):
        (tmp_path / f"f{i}.npy").write_bytes(b"not an npy file at all")
    with pytest.raises(FormatError, match=r"f1\.npy") as info:
        FileSource(tmp_path, format="npy", samples_per_file="header")
    assert info.value.__notes__ == [
        "the headers of 2 other files failed too: "
        + ", ".join(str(tmp_path / f"f{i}.npy") for i in (2, 4))
    ]
    monkeypatch.setattr(_file_counts, "MOST_FAILED", 2)
    with pytest.raises(FormatError, match=r"f1\.npy") as info:
        FileSource(tmp_path, format="npy", samples_per_file="header")
    assert info.value.__notes__ == [
        "the headers of 1 other file failed too (stopped at 2 failures: later files not "
        f"read): {tmp_path / 'f2.npy'}"
    ]


def test_counts_are_not_kept_for_a_listing_with_a_weak_or_no_etag(tmp_path: Path) -> None:
    # A weak ETag (W/"...") or none cannot tell a replaced object from the one counted:
    # such a listing is counted from its headers every time, never from a kept entry.
    from types import SimpleNamespace

    from headrace.formats._file_counts import _kept_counts
    from headrace.formats._files import file_format
    from headrace.io import ObjectCache

    def listing(etags: list[str | None]) -> Any:
        return SimpleNamespace(
            cache=ObjectCache(tmp_path / "c"),
            cache_key=lambda i: f"|s3://b/f{i}.npy",
            remote=True,
            sizes=[100] * len(etags),
            etags=etags,
        )

    npy = file_format("npy")
    kept = _kept_counts(listing(['"a"', '"b"']), npy, None)
    assert kept is not None and kept[2:] == (16, "v1")
    assert _kept_counts(listing(['"a"', 'W/"b"']), npy, None) is None
    assert _kept_counts(listing(['"a"', None]), npy, None) is None
    # Another format or datasets names another entry: the counts differ by them.
    assert _kept_counts(listing(['"a"', '"b"']), file_format("npz"), None)[1] != kept[1]


@pytest.mark.parametrize("kind", ["npy", "hdf5"])
@pytest.mark.parametrize("shuffle", ["files", "samples"])
def test_a_file_shorter_than_samples_per_file_names_the_header_count(
    tmp_path: Path, kind: str, shuffle: str
) -> None:
    # The message named the file, its shape and samples_per_file, not what to do.
    for i, n in enumerate([4, 3, 4]):
        if kind == "npy":
            np.save(tmp_path / f"{i}.npy", np.ones((n, 2)))
        else:
            with h5py.File(tmp_path / f"{i}.h5", "w") as f:
                f["x"] = np.ones((n, 2))
    kw: dict[str, Any] = {"datasets": ("x",)} if kind == "hdf5" else {"npy_ranges_above": 0}
    src = FileSource(tmp_path, format=kind, samples_per_file=4, shuffle=shuffle, **kw)
    with pytest.raises(
        DataError,
        match=r"1\.(npy|h5): '(data|x)' has shape \(3, 2\); expected 4 samples on its leading "
        r"axis \(samples_per_file=4\); where files hold different numbers of samples, give "
        r"samples_per_file='header'",
    ):
        digest(src, steps=3, batch=4)
    assert digest(FileSource(tmp_path, format=kind, samples_per_file="header", **kw)) != ""
