"""FileSource on local files: plan, read-ahead window, modes, formats, errors."""

from __future__ import annotations

import os
import re
import threading
import time
import warnings
from concurrent.futures import Future
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import (
    ConfigError,
    DataError,
    FormatError,
    ObjectNotFoundError,
    StateError,
    StorageError,
)
from headrace.formats import (
    FetchWindow,
    FilePlan,
    FileSource,
    FileSourceConfig,
    IterableFiles,
    encode,
    sample_digests,
    synthetic_arrays,
    write_sample_file,
)
from headrace.formats import _file_source as file_source_module
from headrace.io import _memory as memory_module
from headrace.io._memory import Memory
from headrace.pipeline import Loader, Mixture
from headrace.testing import assert_resume_exact, batch_digest


def make_dataset(
    root: Path, fmt: str, n: int, *, spf: int = 1, shape: tuple[int, ...] = (6, 5, 3)
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    ext = {"jpeg": "jpg", "hdf5": "h5"}.get(fmt, fmt)
    for i in range(n):
        arrays = synthetic_arrays(fmt, seed=i, shape=shape, samples_per_file=spf)
        write_sample_file(fmt, root / f"f{i:03d}.{ext}", arrays)
    return root


def digest_of(source: FileSource, *, steps: int, batch: int, seed: int = 7, **kw: Any) -> str:
    with Loader(source, batch_size=batch, seed=seed, steps=steps, **kw) as loader:
        return batch_digest(loader)


# -- the plan -------------------------------------------------------------------


@pytest.mark.parametrize("shuffle", ["files", "samples", "none"])
def test_plan_is_a_bijection_per_epoch(shuffle: str) -> None:
    plan = FilePlan(num_files=7, samples_per_file=3, shuffle=shuffle)  # type: ignore[arg-type]
    for epoch in range(3):
        f, i = plan.locate(5, np.arange(epoch * 21, epoch * 21 + 21))
        assert sorted((f * 3 + i).tolist()) == list(range(21))
    e1 = plan.locate(5, np.arange(21))
    e2 = plan.locate(5, np.arange(21, 42))
    if shuffle == "none":
        assert np.array_equal(e1[0], e2[0])
    else:
        assert not (np.array_equal(e1[0], e2[0]) and np.array_equal(e1[1], e2[1]))


def test_file_shuffle_keeps_a_files_items_together() -> None:
    plan = FilePlan(num_files=5, samples_per_file=4)
    f, i = plan.locate(1, np.arange(20))
    assert all(len(set(f[k : k + 4].tolist())) == 1 for k in range(0, 20, 4))
    assert sorted(i[:4].tolist()) == [0, 1, 2, 3]
    assert np.array_equal(plan.file_order(1, 0), f[::4])


def test_shuffle_takes_true_and_false_as_rows_tables_and_tokens_do(tmp_path: Path) -> None:
    # FileSource(shuffle=False) was refused ("must be one of ('files', 'samples', 'none')")
    # where every other source takes a bool; now False is "none", True the default.
    root = make_dataset(tmp_path / "d", "npy", 6)
    for flag, name in ((False, "none"), (True, "files")):
        a, b = (
            FileSource(root, format="npy", shuffle=flag),
            FileSource(root, format="npy", shuffle=name),
        )  # type: ignore[arg-type]
        assert a.fingerprint() == b.fingerprint()  # a state saved under one loads under the other
        assert digest_of(a, steps=6, batch=2) == digest_of(b, steps=6, batch=2)
    assert FilePlan(num_files=3, shuffle=False).shuffle == "none"
    with pytest.raises(ConfigError, match=r"True \(files\) or False \(none\) \(got 1\)"):
        FileSource(root, format="npy", shuffle=1)  # type: ignore[arg-type]


def test_plan_rejects_bad_config() -> None:
    with pytest.raises(ConfigError, match="at least one file"):
        FilePlan(num_files=0)
    with pytest.raises(ConfigError, match="samples_per_file"):
        FilePlan(num_files=1, samples_per_file=0)
    with pytest.raises(ConfigError, match="shuffle"):
        FilePlan(num_files=1, shuffle="rows")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=">= 0"):
        FilePlan(num_files=2).locate(0, np.array([-1]))


# -- formats and schema -----------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "spf", "opts", "keys"),
    [
        ("jpeg", 1, {}, {"image"}),
        ("png", 1, {}, {"image"}),
        ("npy", 1, {}, {"data"}),
        ("npy", 3, {}, {"data"}),
        ("npz", 1, {}, {"x", "y"}),
        ("npz", 3, {}, {"x", "y"}),
        ("hdf5", 2, {"datasets": ("x", "y")}, {"x", "y"}),
    ],
)
def test_formats_decode_match_the_files(
    tmp_path: Path, fmt: str, spf: int, opts: dict[str, Any], keys: set[str]
) -> None:
    root = make_dataset(tmp_path / fmt, fmt, 4, spf=spf)
    src = FileSource(root, format=fmt, samples_per_file=spf, **opts)
    with Loader(src, batch_size=2, steps=2 * spf, prefetch=0) as loader:
        batches = list(loader)
    assert set(batches[0]) == keys | {"index"}
    seen = np.concatenate([b["index"] for b in batches])
    assert sorted(seen.tolist()) == list(range(4 * spf))
    for b in batches:
        for k, idx in enumerate(b["index"].tolist()):
            f, i = divmod(idx, spf)
            want = synthetic_arrays(fmt, seed=f, shape=(6, 5, 3), samples_per_file=spf)
            key = "image" if fmt in ("jpeg", "png") else ("data" if fmt == "npy" else "x")
            ref = want[key] if isinstance(want, dict) else want
            if spf > 1:
                ref = ref[i]
            if fmt == "jpeg":  # lossy: compare with a decode of the same bytes
                ref = src.decoder.decode(f, encode("jpeg", ref))["image"]
            np.testing.assert_array_equal(b[key][k], ref)


def test_raw_bytes_and_ragged_shapes(tmp_path: Path) -> None:
    root = tmp_path / "raw"
    root.mkdir()
    for i in range(3):
        (root / f"{i}.bin").write_bytes(bytes(range(i + 2)))
    src = FileSource(root, format="raw", decode=False, shuffle="none")
    b = src.read(0, np.arange(3))
    assert b["bytes"].dtype == object
    assert [bytes(x) for x in b["bytes"]] == [bytes(range(i + 2)) for i in range(3)]
    assert b["bytes_shape"].tolist() == [[2], [3], [4]]
    assert len(sample_digests(b)) == 3
    src.close()


def test_file_list_repr_is_short_for_many_files(tmp_path: Path) -> None:
    root = tmp_path / "many"
    root.mkdir()
    for i in range(300):
        (root / f"{i:04d}.bin").write_bytes(b"ab")
    src = FileSource(root, format="raw")
    text = repr(src.files)
    assert "300 files, 600 bytes" in text
    assert "keys=['0000.bin', '0001.bin', '...', '0299.bin']" in text
    assert len(text) < 300 and "0150.bin" not in text
    src.close()


def test_config_errors(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "j", "jpeg", 2)
    with pytest.raises(ConfigError, match="one sample each"):
        FileSource(root, format="jpeg", samples_per_file=2)
    with pytest.raises(ConfigError, match="datasets"):
        FileSource(root, format="hdf5")
    with pytest.raises(ConfigError, match="mode"):
        FileSourceConfig(mode="fast")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="in_flight"):
        FileSourceConfig(in_flight=0)
    with pytest.raises(ConfigError, match=r"in_flight must be an integer >= 1 \(got True\)"):
        FileSourceConfig(in_flight=True)
    with pytest.raises(ConfigError, match=r"unknown store_options \['bogus'\]"):
        FileSource(root.as_uri(), format="jpeg", store_options={"bogus": 1})
    with pytest.raises(ConfigError, match="decode=False"):
        FileSourceConfig(format="npy", samples_per_file=2, decode=False)
    with pytest.raises(ConfigError, match="unknown file format"):
        FileSource(root, format="tiff")
    with pytest.raises(ConfigError, match="not both"):
        FileSource(root, config=FileSourceConfig(format="jpeg"), decode=False)
    one = root / "f000.jpg"
    with pytest.raises(ConfigError) as exc:
        FileSource(one, format="jpeg")
    assert str(exc.value) == (  # it said "expected a directory ...", not how to read the file
        f"{one}: is a file, not a directory; FileSource takes a directory, a glob pattern, "
        f"an object-store URL or a list of files: pass [{str(one)!r}] (a list) to read this "
        "file alone, or the folder it is in"
    )
    assert FileSource([str(one)], format="jpeg").samples_per_epoch == 1  # the fix works
    # Given with a slash after it, the list to pass is named without (it kept the slash,
    # which a list then refused as "Not a directory", until 2026-12-06).
    with pytest.raises(ConfigError, match=rf"pass \[{re.escape(repr(str(one)))}\] \(a list\)"):
        FileSource(f"{one}/", format="jpeg")
    with pytest.raises(ConfigError, match=r"local_read must be 'pread' or 'odirect' \(got 'mmap'"):
        FileSource(root, format="jpeg", local_read="mmap")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="the list of files is empty"):
        FileSource([], format="jpeg")
    with pytest.raises(DataError, match="no files ending"):
        FileSource(root, format="npz")
    (tmp_path / "empty").mkdir()
    # Raw files have any name: it said "no files ending in [] under it".
    with pytest.raises(DataError, match=r"empty: no files under it$"):
        FileSource(tmp_path / "empty")
    with pytest.raises(ObjectNotFoundError, match=r"nope\.npy"):
        FileSource([root / "nope.npy"], format="npy")
    with pytest.raises(ObjectNotFoundError, match=r"nope: no such directory"):
        FileSource(tmp_path / "nope", format="npy")
    with pytest.raises(ConfigError, match=r"unknown option 'inflight' \(did you mean 'in_flight'"):
        FileSource(root, format="jpeg", inflight=4)
    with pytest.raises(ConfigError, match="store_options"):
        FileSource(root, format="jpeg", store_options={"region": "x"})


def test_files_of_a_known_format_without_format_are_refused_not_read_raw(
    tmp_path: Path,
) -> None:
    # Until 2026-12-03 FileSource("npys") read each .npy's bytes, header and all, as
    # (B, nbytes) uint8, and a folder of JPEGs gave their undecoded bytes, without a word.
    (tmp_path / "npys").mkdir()
    for i in range(3):
        np.save(tmp_path / "npys" / f"{i}.npy", np.full((4, 4), i, np.float32))
    with pytest.raises(ConfigError) as exc:
        FileSource(tmp_path / "npys")
    assert str(exc.value) == (
        f"{tmp_path / 'npys'}: no format was given, so its 3 files would be read as raw "
        "bytes (format='raw', the default), but 3 of them are npy files: pass format='npy' "
        "to decode them, or format='raw' to read their bytes"
    )
    with pytest.raises(ConfigError, match=r"^a list of paths: .* 1 of them are npy files"):
        FileSource([tmp_path / "npys" / "0.npy"])
    with Loader(FileSource(tmp_path / "npys", format="npy"), batch_size=3, steps=1) as loader:
        assert next(iter(loader))["data"].shape == (3, 4, 4)
    raw = FileSource(tmp_path / "npys", format="raw")  # asked for: the bytes
    assert raw.samples_per_epoch == 3
    again = FileSource(tmp_path / "npys", config=raw.config)  # a config says its format
    assert again.format.name == "raw"
    again.close()
    raw.close()
    images = tmp_path / "images"
    images.mkdir()
    write_sample_file("png", images / "a.png", np.zeros((4, 4, 3), np.uint8))
    for name in ("b.JPG", "c.jpeg"):
        write_sample_file("jpeg", images / name, np.zeros((4, 4, 3), np.uint8))
    (images / "notes.bin").write_bytes(b"not an image")
    with pytest.raises(ConfigError) as exc:
        FileSource(images)
    assert "its 4 files would be read as raw bytes" in str(exc.value)
    assert str(exc.value).endswith(
        "but 2 of them are jpeg and 1 are png files: pass format='jpeg' or format='png' to "
        "decode them, or format='raw' to read their bytes"
    )
    (tmp_path / "blobs").mkdir()
    (tmp_path / "blobs" / "a.bin").write_bytes(b"12345678")  # no known format: raw it is
    blobs = FileSource(tmp_path / "blobs")
    assert blobs.format.name == "raw"
    blobs.close()


def test_a_batch_is_laid_out_by_its_own_samples_whatever_the_chunk(tmp_path: Path) -> None:
    # Files of two shapes, alternating. A step whose samples agree is one dense array;
    # one whose samples differ is ragged (object array + data_shape). That used to be
    # decided per chunk of steps, so the same step came out differently with another
    # chunk_steps (or worker count).
    for i in range(6):
        np.save(tmp_path / f"f{i}.npy", np.full((3, 4 + i % 2), i, dtype=np.float32))
    src = FileSource(tmp_path, format="npy", shuffle="none")
    for batch in (1, 2):
        runs = []
        for chunk in (1, 4, 32):
            with Loader(src, batch_size=batch, steps=6 // batch, chunk_steps=chunk) as ld:
                runs.append([dict(b) for b in ld])
        for run in runs[1:]:
            assert batch_digest(run) == batch_digest(runs[0])
        steps = [src.read(0, np.arange(t * batch, (t + 1) * batch)) for t in range(6 // batch)]
        assert batch_digest(runs[0]) == batch_digest(steps)  # as read step by step
        for t, b in enumerate(runs[-1]):
            if batch == 1:
                assert b["data"].shape == (1, 3, 4 + t % 2) and "data_shape" not in b
            else:
                assert b["data"].dtype == object
                assert b["data_shape"].tolist() == [[3, 4], [3, 5]]
    src.close()


def test_a_ragged_batch_has_shape_columns_for_its_own_samples(tmp_path: Path) -> None:
    # Samples of one and two dimensions: a step of 1-D samples read in a chunk with 2-D
    # ones had [[4, 0], [5, 0]] (another digest than [[4], [5]] read alone).
    for i, shape in enumerate([(3,), (2,), (2, 2), (4,), (5,), (2, 3)]):
        np.save(tmp_path / f"{i}.npy", np.zeros(shape, np.float32))
    runs = []
    for chunk in (1, 32):
        src = FileSource(tmp_path, format="npy", shuffle="none")
        with Loader(src, batch_size=2, steps=3, chunk_steps=chunk, prefetch=0) as ld:
            runs.append(list(ld))
        src.close()
    assert batch_digest(runs[0]) == batch_digest(runs[1])
    assert [b["data_shape"].tolist() for b in runs[1]] == [
        [[3], [2]],  # one column: both samples are 1-D (two, read in the whole chunk)
        [[2, 2], [4, 0]],
        [[5, 0], [2, 3]],
    ]


def test_a_file_with_other_keys_is_named(tmp_path: Path) -> None:
    for i in range(4):
        np.savez(tmp_path / f"f{i}.npz", **{("zz" if i == 2 else "a"): np.zeros(3)})
    for chunk in (1, 32):  # with one step a chunk the odd file went through as a batch
        src = FileSource(tmp_path, format="npz", shuffle="none")
        with Loader(src, batch_size=1, steps=4, chunk_steps=chunk, prefetch=0) as ld:
            with pytest.raises(
                FormatError, match=r"f2\.npz: holds \[.zz.\], but \S*f\d\.npz holds \[.a.\]"
            ):
                list(ld)
        src.close()


def test_two_files_decoded_at_once_with_other_keys_are_named(tmp_path: Path) -> None:
    # The first file decoded sets the keys every file must hold. Two decode threads
    # could both find none set and each set its own: the odd file then went through,
    # and the batch failed an assert in stacking, naming no file. A slow read of the
    # attribute (fault injection) holds that window open.
    for i, key in enumerate(["a", "b"]):
        np.savez(tmp_path / f"f{i}.npz", **{key: np.zeros(3)})

    class SlowFirstLook(FileSource):
        @property  # type: ignore[override]
        def _keys(self) -> Any:
            got = self.__dict__.get("_k")
            if got is None:
                time.sleep(0.2)  # both threads look before either sets
            return got

        @_keys.setter
        def _keys(self, value: Any) -> None:
            self.__dict__["_k"] = value

    src = SlowFirstLook(tmp_path, format="npz", shuffle="none", decode_threads=2)
    with pytest.raises(FormatError, match=r"f\d\.npz: holds \[.(a|b).\], but \S*f\d\.npz holds"):
        src.read(0, np.arange(2))
    src.close()


def test_npz_members_are_picked_with_datasets(tmp_path: Path) -> None:
    # datasets= was read for HDF5 only: given for NPZ it was silently ignored, so a file
    # with an extra member (or a JSON note) still failed, and the NPZ error said to pick
    # members with keys=, which FileSource does not take.
    for i in range(4):
        extra = {"meta": np.zeros(2)} if i == 1 else {}
        np.savez(tmp_path / f"f{i}.npz", x=np.full((2, 3), i), y=np.arange(2) + 10 * i, **extra)
    src = FileSource(tmp_path, format="npz", samples_per_file=2, datasets=("x",), shuffle="none")
    batch = src.read(0, np.arange(8))
    assert sorted(batch) == ["index", "x"]
    assert batch["x"][:, 0].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    with pytest.raises(FormatError, match=r"f1\.npz: holds \['meta', 'x', 'y'\]"):
        FileSource(tmp_path, format="npz", shuffle="none").read(0, np.arange(4))
    # A member missing from one file names the file and what it holds.
    (tmp_path / "f2.npz").unlink()
    np.savez(tmp_path / "f2.npz", y=np.arange(2))
    src = FileSource(tmp_path, format="npz", samples_per_file=2, datasets=("x", "y"))
    with pytest.raises(
        FormatError, match=r"f2\.npz: no member\(s\) \['x'\] in NPZ; it holds \['y'"
    ):
        src.read(0, np.arange(8))
    # Formats of one array per file have nothing to pick.
    with pytest.raises(
        ConfigError,
        match=r"datasets names the HDF5 datasets, NPZ members, tar fields or TFRecord features",
    ):
        FileSource(tmp_path, format="npy", datasets=("x",))


def test_wrong_sample_axis_names_the_file(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "n", "npy", 2, spf=2)
    src = FileSource(root, format="npy", samples_per_file=3, shuffle="none")
    with pytest.raises(DataError, match=r"f000\.npy.*expected 3 samples"):
        src.read(0, np.arange(3))
    src.close()


@pytest.mark.parametrize(("fmt", "ext"), [("jpeg", "jpg"), ("npz", "npz"), ("hdf5", "h5")])
@pytest.mark.parametrize("mode", ["headrace", "map-style"])
def test_corrupt_file_names_the_file(tmp_path: Path, fmt: str, ext: str, mode: str) -> None:
    root = make_dataset(tmp_path / fmt, fmt, 3)
    good = (root / f"f001.{ext}").read_bytes()
    (root / f"f001.{ext}").write_bytes(good[:20] + b"\x00garbage" * 8)
    opts: dict[str, Any] = {"datasets": ("x",)} if fmt == "hdf5" else {}
    src = FileSource(root, format=fmt, shuffle="none", mode=mode, **opts)
    with pytest.raises(FormatError, match=rf"f001\.{ext}"):
        src.read(0, np.arange(3))
    src.close()


def test_file_that_shrank_since_listing_is_refused(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "n", "npy", 2)
    src = FileSource(root, format="npy", shuffle="none")
    path = root / "f001.npy"
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(StorageError, match=r"f001\.npy: truncated or changed.*refusing"):
        src.read(0, np.arange(2))
    src.close()


def test_a_directory_that_cannot_be_listed_is_a_storage_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A directory without search permission (chmod 600) lists its names, but stat on
    # each answers EACCES: that must be headrace's PermissionDeniedError, naming it.
    import errno
    import os

    from headrace.errors import PermissionDeniedError

    root = make_dataset(tmp_path / "n", "npy", 3)
    real = os.stat

    def denied(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path).endswith("f001.npy"):  # fault injection (root ignores permissions)
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", denied)
    with pytest.raises(PermissionDeniedError, match=r"f001\.npy: permission denied"):
        FileSource(root, format="npy")


# -- determinism across modes, workers, resume ------------------------------------


def test_modes_and_strategies_give_identical_batches(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "npz", "npz", 10, spf=3)
    digests = set()
    for opts in (
        {"mode": "map-style"},
        {"in_flight": 1, "decode_threads": 0},
        {"in_flight": 4, "decode_threads": 2},
        {"local_read": "odirect", "in_flight": 3},
        {"local_read": "odirect", "mode": "map-style"},
        {"speculate": False, "in_flight": 2},
    ):
        src = FileSource(root, format="npz", samples_per_file=3, **opts)
        digests.add(digest_of(src, steps=12, batch=4))
    assert len(digests) == 1


def test_epochs_reshuffle_and_workers_agree(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "j", "jpeg", 8)
    src = FileSource(root, format="jpeg")
    with Loader(src, batch_size=4, seed=3, steps=4, prefetch=0) as loader:
        order = [b["index"].tolist() for b in loader]
    e1, e2 = order[0] + order[1], order[2] + order[3]
    assert sorted(e1) == sorted(e2) == list(range(8))
    assert e1 != e2
    # Two loader workers each taking every other step give the same global stream.
    parts = []
    for w in range(2):
        with Loader(
            FileSource(root, format="jpeg"), batch_size=4, seed=3, steps=4,
            step_stride=2, step_offset=w,
        ) as loader:  # fmt: skip
            parts.append([b["index"].tolist() for b in loader])
    assert [parts[t % 2][t // 2] for t in range(4)] == order


def test_resume_mid_epoch(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "n", "npy", 9, spf=2)
    assert_resume_exact(
        lambda: Loader(
            FileSource(root, format="npy", samples_per_file=2, in_flight=3),
            batch_size=4,
            seed=11,
            steps=10,
            chunk_steps=2,
        ),
        steps=10,
        resume_at=[1, 4, 7],
    )


def test_iterable_mode_shards_and_reshuffles(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "j", "jpeg", 12)
    src = FileSource(root, format="jpeg")

    def run(workers: int, epoch: int) -> tuple[list[list[int]], list[str]]:
        orders, digests = [], []
        for w in range(workers):
            it = IterableFiles(src, batch_size=2, worker=w, num_workers=workers, in_flight=4)
            for b in it.epoch(seed=5, epoch=epoch):
                orders.append(b["index"].tolist())
                digests += sample_digests(b)
        return orders, sorted(digests)

    one_e0, d0 = run(1, 0)
    one_e1, d1 = run(1, 1)
    assert one_e0 != one_e1 and d0 == d1
    assert run(1, 0) == (one_e0, d0)  # the same run again
    _, d3 = run(3, 0)
    assert d3 == d0  # another worker count: the same samples, another order
    # The global plan's canonical digest is the same set of samples.
    with Loader(FileSource(root, format="jpeg"), batch_size=2, seed=5, steps=6) as loader:
        assert sorted(d for b in loader for d in sample_digests(b)) == d0
    # drop-last: 12 files over 5 workers in batches of 2
    it = IterableFiles(src, batch_size=2, worker=0, num_workers=5)
    assert [len(b["index"]) for b in it.epoch(5, 0)] == [2]
    with pytest.raises(ConfigError, match="worker"):
        IterableFiles(src, batch_size=2, worker=2, num_workers=2)
    with pytest.raises(ConfigError, match="batch_size"):
        IterableFiles(src, batch_size=0)
    src.close()


# -- the read-ahead window --------------------------------------------------------


def test_held_bytes_stay_within_the_window(tmp_path: Path) -> None:
    root = tmp_path / "big"
    root.mkdir()
    size = 256 * 1024
    for i in range(24):
        (root / f"{i:02d}.bin").write_bytes(bytes([i]) * size)
    src = FileSource(root, format="raw", decode=False, in_flight=4)
    with Loader(src, batch_size=2, steps=12, prefetch=2, chunk_steps=2) as loader:
        n = sum(1 for _ in loader)
    assert n == 12
    st = src.stats
    assert st.fetches == 24  # nothing past the last step
    src.close()
    assert src.stats.held_bytes == 0
    assert size < st.peak_held_bytes <= 4 * size
    assert st.max_in_flight_observed <= 4


@pytest.mark.parametrize(("in_flight", "threads"), [(1, 0), (2, 2)])
def test_files_held_ahead_are_taken_first_so_the_window_bound_holds(
    tmp_path: Path, in_flight: int, threads: int
) -> None:
    # Chunks of 24 samples, an epoch each: a chunk ends on a file the next epoch visits
    # again later, and speculation fetches files of the chunk after next. Taking the
    # chunk's files in plan order while those were held held in_flight + 1 files.
    root = make_dataset(tmp_path / "z", "npz", 8, spf=3)
    for seed in range(3):
        src = FileSource(
            root, format="npz", samples_per_file=3, in_flight=in_flight, decode_threads=threads
        )
        ref = FileSource(root, format="npz", samples_per_file=3)
        assert digest_of(src, steps=30, batch=4, seed=seed, chunk_steps=6) == digest_of(
            ref, steps=30, batch=4, seed=seed, chunk_steps=6
        )
        assert 0 < src.stats.peak_held_bytes <= in_flight * max(src.files.sizes)


def test_prefetch_starts_fetches_ahead(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "n", "npy", 6)
    src = FileSource(root, format="npy", in_flight=4, shuffle="none", speculate=False)
    src.prefetch(0, np.arange(6))
    assert src.window.queued == [4, 5]  # four started, two waiting for a slot
    b = src.read(0, np.arange(6))
    assert b["index"].tolist() == list(range(6))
    assert src.stats.fetches == 6
    src.close()


def test_window_retries_a_failed_fetch_on_demand() -> None:
    calls: list[int] = []

    def fetch(i: int) -> bytes:
        calls.append(i)
        # File 0's first fetch fails, whichever thread gets there first.
        if calls.count(0) == 1 and i == 0:
            raise StorageError("boom")
        return b"x" * (i + 1)

    w = FetchWindow(fetch, 2)
    w.plan([0, 1])
    with pytest.raises(StorageError, match="boom"):
        w.take(0)
    assert w.take(0) == b"x"
    w.release(0)
    assert w.take(1) == b"xx"
    w.release(1)
    assert w.stats.held_bytes == 0
    w.close()


def test_stale_read_ahead_is_dropped(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "n", "npy", 8)
    src = FileSource(root, format="npy", in_flight=3, shuffle="none", speculate=False)
    src.prefetch(0, np.arange(4, 8))
    b = src.read(0, np.arange(2))  # a jump elsewhere (a resume): the old plan goes
    assert b["index"].tolist() == [0, 1]
    assert src.stats.held_bytes == 0
    src.close()


def test_a_stale_fetch_ending_mid_jump_starts_no_file_of_the_old_plan(tmp_path: Path) -> None:
    # Files 4, 5, 6 in flight and 7 queued for a read-ahead; a read of 0 and 1 drops them.
    # A dropped fetch that ended before the read gave its plan started the next queued
    # file, 7, which stayed held until the window closed (1 test run in 3 above).
    import threading

    root = make_dataset(tmp_path / "n", "npy", 8)
    src = FileSource(root, format="npy", in_flight=3, shuffle="none", speculate=False)
    window = src.window
    fetch, gate = window._fetch, threading.Event()

    def held_back(f: int) -> Any:
        if f >= 4:
            gate.wait(10)
        return fetch(f)

    window._fetch = held_back
    plan = window.plan

    def plan_after_the_stale_fetches_end(files: Any) -> None:
        gate.set()  # the dropped fetches end now, between the drop and the new plan
        deadline = time.monotonic() + 10
        while window.stats.in_flight and time.monotonic() < deadline:
            time.sleep(0.005)
        plan(files)

    src.prefetch(0, np.arange(4, 8))
    window.plan = plan_after_the_stale_fetches_end  # type: ignore[method-assign]
    assert src.read(0, np.arange(2))["index"].tolist() == [0, 1]
    time.sleep(0.05)  # anything started meanwhile has ended
    assert window.held() == set() and src.stats.held_bytes == 0
    src.close()


@pytest.mark.parametrize("steps", [3, 7, 10])
def test_a_run_fetches_no_file_past_its_last_step(tmp_path: Path, steps: int) -> None:
    # Guessing the run after each read kept the window busy; after the last step's
    # read it fetched files no step asks for (a 20-step bench trial read 16 more files).
    root = make_dataset(tmp_path / "n", "npy", 64)
    src = FileSource(root, format="npy", in_flight=16)
    with Loader(src, batch_size=4, seed=3, steps=steps) as loader:
        files = {int(i) for b in loader for i in b["index"]}
    src.window.close()  # wait for anything still in flight
    assert len(files) == 4 * steps  # one epoch: no file twice
    assert src.stats.fetches == 4 * steps
    src.close()


@pytest.mark.parametrize(
    "split",
    [
        {"rank": 1, "world_size": 2, "chunk_steps": 1},  # hosts
        {"step_stride": 3, "step_offset": 1, "chunk_steps": 1},  # DataLoader workers
    ],
)
def test_a_host_or_worker_fetches_only_its_own_files(tmp_path: Path, split: dict[str, int]) -> None:
    # The guess after a step (the next B samples) is another host's slice or another
    # worker's step: each fetched twice the files it used.
    root = make_dataset(tmp_path / "n", "npy", 64)
    src = FileSource(root, format="npy", in_flight=16)
    with Loader(src, batch_size=4, seed=3, steps=12, **split) as loader:
        used = [int(i) for b in loader for i in b["index"]]
    src.window.close()
    assert len(used) == len(set(used)) > 0
    assert src.stats.fetches == len(used)
    src.close()


def test_a_mixtures_file_sources_fetch_only_their_samples_files(tmp_path: Path) -> None:
    a = FileSource(make_dataset(tmp_path / "a", "npy", 40), format="npy", in_flight=16)
    b = FileSource(make_dataset(tmp_path / "b", "npy", 40), format="npy", in_flight=16)
    mix = Mixture([a, b], [0.5, 0.5], batch_size=8)
    with Loader(mix, batch_size=8, seed=1, steps=3) as loader:
        assert sum(1 for _ in loader) == 3
    for src in (a, b):
        src.window.close()
    assert a.stats.fetches + b.stats.fetches == 24
    a.close()
    b.close()


def test_islice_then_close_leaves_nothing_running(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "j", "jpeg", 6)
    with Loader(FileSource(root, format="jpeg", in_flight=2), batch_size=2, seed=1) as loader:
        assert len(list(islice(loader, 7))) == 7  # wraps into epochs 2 and 3


def test_speculation_reads_the_next_run_before_it_is_asked(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "n", "npy", 8)
    src = FileSource(root, format="npy", in_flight=8, shuffle="none")
    src.read(0, np.arange(3))
    assert src.stats.fetches + src.stats.in_flight + len(src.window.queued) >= 3
    src.window.close()  # wait for the guesses
    assert src.stats.fetches == 6  # 0-2 asked for, 3-5 guessed
    src.close()


def test_pickled_copy_reads_the_same_without_listing_again(tmp_path: Path) -> None:
    import pickle

    for i in range(6):
        np.save(tmp_path / f"{i}.npy", np.full((3,), i, dtype=np.int32))
    src = FileSource(tmp_path, format="npy")
    copy = pickle.loads(pickle.dumps(src))
    (tmp_path / "extra.npy").write_bytes((tmp_path / "0.npy").read_bytes())  # listed later
    samples = np.arange(6)
    a, b = src.read(3, samples), copy.read(3, samples)
    assert copy.files.keys == src.files.keys
    assert all(np.array_equal(a[k], b[k]) for k in a)
    src.close()
    copy.close()


def test_slow_decodes_do_not_hold_more_than_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A chunk of more files than the window while decodes lag (fault: slow
    # decoder): taking the next file must wait for a slot, not fetch past it.
    root = tmp_path / "r"
    root.mkdir()
    size = 1000
    for i in range(12):
        (root / f"{i:02d}.bin").write_bytes(bytes([i]) * size)
    src = FileSource(root, format="raw", in_flight=2, decode_threads=2, speculate=False)
    decode = src.decoder.decode

    def slow(f: int, data: Any, *into: Any) -> Any:
        time.sleep(0.005)
        return decode(f, data, *into)

    monkeypatch.setattr(src.decoder, "decode", slow)
    b = src.read(0, np.arange(10))
    assert len(set(b["index"].tolist())) == 10
    assert src.stats.peak_held_bytes <= 2 * size
    src.close()
    assert src.stats.held_bytes == 0


def test_release_racing_a_finishing_fetch_keeps_held_bytes_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Fault injection: stall the fetch thread between counting its bytes and
    # publishing them, and release the file in that gap.
    import headrace.formats._file_window as fw

    counted, go = threading.Event(), threading.Event()

    class StallingFuture(Future):  # type: ignore[type-arg]
        def set_result(self, result: Any) -> None:
            counted.set()
            go.wait()
            super().set_result(result)

    monkeypatch.setattr(fw, "Future", StallingFuture)
    w = FetchWindow(lambda i: b"abcd", 2)
    w.plan([0])
    counted.wait()
    w.release(0)
    go.set()
    w.close()
    assert w.stats.fetches == 1
    assert w.stats.held_bytes == 0


def test_close_wakes_a_take_whose_fetch_was_cancelled() -> None:
    # take() of a file beyond the window queues its fetch behind a busy one;
    # close() cancels queued fetches, and the waiter must hear about it.
    gate = threading.Event()

    def fetch(i: int) -> bytes:
        if i == 0:
            gate.wait()
        return b"x"

    w = FetchWindow(fetch, 1)
    w.plan([0])
    errors: list[BaseException] = []

    def take_one() -> None:
        try:
            w.take(1)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=take_one, daemon=True)
    t.start()
    # Both started: file 0's fetch running, take(1)'s queued behind it. (Closed before
    # take(1) ran, the window would just start a new pool for it: the test would hang.)
    while not w.stats.in_flight or 1 not in w._entries:
        time.sleep(0.001)
    closer = threading.Thread(target=w.close)
    closer.start()
    while w._pool is not None:
        time.sleep(0.001)
    gate.set()
    closer.join()
    t.join(timeout=10)
    assert not t.is_alive(), "take() still waits on a fetch that close() cancelled"
    assert len(errors) == 1 and isinstance(errors[0], StateError)
    assert "files 1" in str(errors[0])


_BIG_OBJECTS = """
import json, resource, sys
from headrace.formats import FileSource
from headrace.pipeline import Loader

def rss():
    with open("/proc/self/status") as f:
        return {l.split(":")[0]: int(l.split()[1]) * 1024 for l in f if l.startswith("Rss")}

src = FileSource(sys.argv[1], format="raw", decode=False, in_flight=2, speculate=False)
base = rss()["RssAnon"]
peak = base
with Loader(src, batch_size=1, seed=0, steps=6, prefetch=1, chunk_steps=1) as ld:
    for batch in ld:
        peak = max(peak, rss()["RssAnon"])
        del batch
held = src.stats.peak_held_bytes
src.close()
print(json.dumps({"base": base, "peak": peak, "held": held}))
"""


def test_memory_stays_bounded_for_140_mib_objects(tmp_path: Path) -> None:
    # Six 140 MiB objects read through the object-store path (file:// goes through
    # obstore like s3://) with 2 in flight and one batch (one object) read ahead: the
    # process holds a few objects at a time, never the dataset (840 MiB). Anonymous RSS
    # is sampled at every batch in a fresh process, so it is the reader's own.
    import json
    import subprocess
    import sys

    size = 140 << 20
    root = tmp_path / "big"
    root.mkdir()
    for i in range(6):
        with open(root / f"{i}.bin", "wb") as f:
            f.truncate(size)  # sparse: the bytes are zeros, the reads are real
    out = subprocess.run(
        [sys.executable, "-c", _BIG_OBJECTS, f"file://{root}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    r = json.loads(out.strip().splitlines()[-1])
    assert size <= r["held"] <= 2 * size  # in_flight x object size
    # The fetches held and the batch handed over (a view of its fetch): 3 objects at most
    # (1 measured), against 6 for a pre-load.
    assert r["peak"] - r["base"] <= 3 * size + (32 << 20), r


# -- corrupt files, replaced ------------------------------------------------------


def _corrupt(root: Path, names: list[str]) -> None:
    for name in names:
        good = (root / name).read_bytes()
        (root / name).write_bytes(good[:20] + b"\x00garbage" * 8)


def _epoch(src: FileSource, batch: int, seed: int = 7, **kw: Any) -> list[dict[str, Any]]:
    steps = src.samples_per_epoch // batch
    with Loader(src, batch_size=batch, seed=seed, steps=steps, **kw) as loader:
        return [{k: v.copy() for k, v in b.items()} for b in loader]


@pytest.mark.parametrize(("fmt", "ext"), [("jpeg", "jpg"), ("npz", "npz")])
def test_corrupt_files_are_replaced_the_same_way_in_every_mode(
    tmp_path: Path, fmt: str, ext: str
) -> None:
    root = make_dataset(tmp_path / fmt, fmt, 40)
    _corrupt(root, [f"f007.{ext}", f"f023.{ext}"])
    opts: dict[str, Any] = {"format": fmt, "on_corrupt": "replace", "max_corrupt": 0.05}
    src = FileSource(root, **opts)
    batches = _epoch(src, 8)
    index = np.concatenate([b["index"] for b in batches])
    assert len(index) == 40 and not {7, 23} & set(index.tolist())
    assert sorted(src.corrupt_files) == [str(root / f"f007.{ext}"), str(root / f"f023.{ext}")]
    assert "corrupt" in src.corrupt_files[str(root / f"f007.{ext}")]
    assert src.replaced_samples == 2
    # Each delivered sample is what its index says: the replacement's own bytes.
    clean = FileSource(root, format=fmt, shuffle="none")
    for b in batches:
        want = clean.read(0, b["index"])
        assert want.keys() == b.keys()
        assert all(np.array_equal(want[k], b[k]) for k in b)
    clean.close()
    src.close()
    digest = batch_digest(iter(batches))
    for extra in (
        {"mode": "map-style"},
        {"decode_threads": 0, "in_flight": 1},
        {"in_flight": 3},
    ):
        with FileSource(root, **opts, **extra) as other:
            assert batch_digest(iter(_epoch(other, 8))) == digest, extra
    # Two hosts, each finding the corrupt files it reads, together read the same batches.
    halves = []
    for rank in range(2):
        with FileSource(root, **opts) as other:
            halves.append(_epoch(other, 8, rank=rank, world_size=2))
    merged = [{k: np.concatenate([a[k], b[k]]) for k in a} for a, b in zip(*halves, strict=True)]
    assert batch_digest(iter(merged)) == digest


def test_replacement_is_exact_on_resume(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "n", "npz", 12, spf=2)
    _corrupt(root, ["f004.npz"])

    def make() -> Loader:
        src = FileSource(
            root, format="npz", samples_per_file=2, on_corrupt="replace", max_corrupt=0.1
        )
        return Loader(src, batch_size=4, seed=3, steps=14)

    assert_resume_exact(make, steps=14, resume_at=[5, 6, 11])
    # A run that stopped on the corrupt file (on_corrupt="raise") resumes with "replace".
    with Loader(FileSource(root, format="npz", samples_per_file=2), batch_size=4, seed=3) as a:
        state = a.state_dict()
    with make() as b:
        b.load_state_dict(state)


def test_too_many_corrupt_files_raise_naming_them(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "n", "npz", 20)
    _corrupt(root, ["f001.npz", "f002.npz", "f003.npz"])
    src = FileSource(root, format="npz", shuffle="none", on_corrupt="replace", max_corrupt=0.1)
    with pytest.raises(
        DataError,
        match=r"3 of 20 files are corrupt.*max_corrupt=0.1 allows \(2\)"
        r".*f001\.npz.*f002\.npz.*f003\.npz",
    ):
        src.read(0, np.arange(8))
    src.close()


def test_a_sample_without_a_readable_replacement_raises(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "n", "npy", 6)
    _corrupt(root, [f"f{i:03d}.npy" for i in range(1, 6)])  # only f000 decodes
    src = FileSource(
        root, format="npy", shuffle="none", on_corrupt="replace", max_corrupt=1.0, max_retries=2
    )
    # Five of six files are corrupt: some sample's two replacements (a hash of
    # (seed, sample, a)) both land on corrupt files.
    with pytest.raises(
        DataError,
        match=r"sample \d+ \(\S*f00\d\.npy is corrupt\) found no readable "
        r"replacement in max_retries=2 tries \(tried \S*f00\d\.npy, \S*f00\d\.npy\)",
    ):
        for s in range(6):
            src.read(0, np.array([s]))
    src.close()


def test_corrupt_option_checks(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "n", "npy", 2)
    for bad, match in (
        ({"on_corrupt": "skip"}, "on_corrupt must be"),
        ({"max_corrupt": 1.5}, "max_corrupt must be"),
        ({"max_retries": 0}, "max_retries must be"),
    ):
        with pytest.raises(ConfigError, match=match):
            FileSource(root, format="npy", **bad)


def test_map_style_does_not_hold_a_decoded_file_per_sample(tmp_path: Path) -> None:
    # Map-style decodes a whole file for each sample; its item must not stay a view
    # of that file (a batch of 400 samples of 143 MB files held 57 GB: OOM killed).
    import weakref

    root = make_dataset(tmp_path / "n", "npy", 2, spf=50)
    src = FileSource(root, format="npy", samples_per_file=50, mode="map-style")
    alive = [0]
    most = [0]
    fetch = src.files._fetch

    def counted(f: int) -> Any:  # the file's bytes: what decoded NPY arrays view
        data = fetch(f)
        alive[0] += 1
        weakref.finalize(data, lambda: alive.__setitem__(0, alive[0] - 1))
        most[0] = max(most[0], alive[0])
        return data

    src.files._fetch = counted
    batch = src.read(0, np.arange(40))
    assert batch["data"].shape[0] == 40
    assert most[0] <= 2  # one file's bytes at a time (and the next being read)
    src.close()


def test_decode_threads_default_to_the_cpus_at_most_8(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import headrace.formats._file_decode as fs

    make_dataset(tmp_path, "npy", 4)
    for cpus, want in ((1, 1), (2, 2), (16, 8)):
        monkeypatch.setattr(fs, "usable_cpus", lambda n=cpus: n)
        src = FileSource(tmp_path, format="npy")
        assert src.decode_threads == want
        src.close()
    src = FileSource(tmp_path, format="npy", decode_threads=0)
    assert src.decode_threads == 0
    src.close()
    with pytest.raises(ConfigError, match="decode_threads must be >= 0"):
        FileSource(tmp_path, format="npy", decode_threads=-1)


def test_default_in_flight_holds_at_most_4_gib_of_large_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The window holds in_flight whole files: by default 16 here (64 on object stores),
    # whatever their size, so 1 GiB HDF5 shards held 16 GiB (64 on S3) before a sample
    # was read. The default now keeps in_flight x largest file within 4 GiB (2 at least).
    for i, size in enumerate([1 << 30, 3 << 30, 100 << 20]):
        with open(tmp_path / f"{i}.npy", "wb") as f:
            f.truncate(size)  # sparse: only listed here, never read
    assert FileSource(tmp_path, format="npy").in_flight == 2  # 4 GiB // 3 GiB, at least 2
    (tmp_path / "1.npy").unlink()
    assert FileSource(tmp_path, format="npy").in_flight == 4  # 4 GiB // 1 GiB
    (tmp_path / "0.npy").unlink()
    assert FileSource(tmp_path, format="npy").in_flight == 16  # small files: as before
    with open(tmp_path / "0.npy", "wb") as f:
        f.truncate(1 << 30)
    # As asked (on a machine of 1 TiB: 12 GiB is more than a small one has, and warned).
    big = Memory(available=1 << 40, bound="host", host=1 << 40)
    monkeypatch.setattr(file_source_module, "available_memory", lambda: big)
    assert FileSource(tmp_path, format="npy", in_flight=12).in_flight == 12
    src = FileSource(tmp_path.as_uri(), format="npy")
    assert src.files.remote and src.in_flight == 4
    src.close()


def test_a_moved_copy_resumes_and_other_files_are_refused(tmp_path: Path) -> None:
    # The fingerprint holds names below the dataset's folder, not the folder: a copy on
    # another mount resumes (as token, row and table sources do); other files do not.
    import shutil

    old = make_dataset(tmp_path / "a" / "ds", "npy", 12)
    new = tmp_path / "b" / "copy"
    shutil.copytree(old, new)

    def relative_and_absolute(root: Path) -> FileSource:
        paths = sorted(str(p) for p in root.iterdir())
        return FileSource([os.path.relpath(paths[0]), *paths[1:]], format="npy")

    for make in (
        lambda root: FileSource(str(root), format="npy"),
        lambda root: FileSource(sorted(str(p) for p in root.iterdir()), format="npy"),
        relative_and_absolute,  # its fingerprint raised "Can't mix absolute and relative"
    ):
        with Loader(make(old), batch_size=4, seed=1, steps=9) as ld:
            it = iter(ld)
            for _ in range(4):
                next(it)
            state = ld.state_dict()
            rest = [batch_digest([b]) for b in it]
        with Loader(make(new), batch_size=4, steps=9) as moved:
            moved.load_state_dict(state)
            assert [batch_digest([b]) for b in moved] == rest
    (new / "f011.npy").rename(new / "g011.npy")
    with pytest.raises(StateError, match="what differs: keys"):
        Loader(FileSource(str(new), format="npy"), batch_size=4).load_state_dict(state)


class _EndsWhenCounted(Future):  # type: ignore[type-arg]
    """A finished decode that says "running" until the count of running decodes in
    which the third of them is first looked at; then every one of them says done.
    (What a pool thread finishing the decodes right after that count looks like.)"""

    def __init__(self, group: list[_EndsWhenCounted]) -> None:
        super().__init__()
        self.group = group
        self.running = True
        self.looked_at = False
        group.append(self)

    def done(self) -> bool:
        was = self.running
        if len(self.group) > 2 and self is self.group[2] and not self.looked_at:
            for f in self.group:
                f.running = False
        self.looked_at = True
        return not was


class _InlineDecodes:
    def __init__(self) -> None:
        self.group: list[_EndsWhenCounted] = []

    def submit(self, fn: Any, *args: Any) -> Future:  # type: ignore[type-arg]
        fut = _EndsWhenCounted(self.group)
        fut.set_result(fn(*args))
        return fut

    def shutdown(self, wait: bool = True) -> None:
        pass


def test_decodes_that_end_between_count_and_wait_do_not_stop_the_read(tmp_path: Path) -> None:
    # The read counted the decodes still running, then picked "the first one not done":
    # when they had all ended in between, next() raised StopIteration, which the
    # loader's generator turned into "RuntimeError: generator raised StopIteration"
    # (met once in a soak of KeyboardInterrupts and resumes).
    root = make_dataset(tmp_path / "npy", "npy", 6)
    src = FileSource(root, format="npy", decode_threads=1, in_flight=8, shuffle="none")
    want = src.read(0, np.arange(4))
    src.decoder._pool = _InlineDecodes()  # type: ignore[assignment]
    got = src.read(0, np.arange(4))
    assert len(src.decoder._pool.group) == 4  # type: ignore[attr-defined]
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_datasets_as_one_string_is_refused(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "h", "npz", 2)
    with pytest.raises(ConfigError, match=r"datasets=\('x',\), not a string"):
        FileSource(root, format="npz", datasets="x")


def test_datasets_as_a_set_are_refused(tmp_path: Path) -> None:
    # Read in the set's order, which changes between processes: the batch's keys and the
    # state's fingerprint too (a restart refused its state at random).
    root = make_dataset(tmp_path / "h", "npz", 2)
    with pytest.raises(ConfigError, match=r"datasets=\['x', 'y'\], not a set: a set's order"):
        FileSource(root, format="npz", datasets={"y", "x"})


def test_the_default_in_flight_holds_at_most_half_a_containers_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A container limited to 1 GiB: 16 files of 100 MiB in flight held 1.6 GiB, the
    # default's 4 GiB cap measured against the host (fails before: in_flight 16).
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        with open(data / f"{i}.npy", "wb") as f:
            f.truncate(100 << 20)  # sparse: only listed here, never read
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    (cgroup / "memory.max").write_text(f"{1 << 30}\n")
    (cgroup / "memory.current").write_text("0\n")
    (tmp_path / "self-cgroup").write_text("0::/\n")
    monkeypatch.setattr(memory_module, "PROC_CGROUP", tmp_path / "self-cgroup")
    monkeypatch.setattr(memory_module, "CGROUP_ROOT", cgroup)
    with FileSource(data, format="npy") as src:
        assert src.in_flight == 5  # 512 MiB // 100 MiB
    (cgroup / "memory.max").write_text("max\n")  # no limit: the host's, ample here
    with FileSource(data, format="npy") as src:
        assert src.in_flight == 16


def test_an_in_flight_given_that_would_hold_more_than_memory_is_warned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # in_flight=64 of 1 GiB volumes holds 64 GiB: the kernel killed the run without a word.
    for i in range(4):
        np.save(tmp_path / f"v{i}.npy", np.zeros((64, 1024), np.uint8))  # 65,664 bytes
    # A container limited to 1 MiB (cgroup v2 files in a tree laid out like /sys/fs/cgroup),
    # on a host with far more: the container's limit binds, and the warning names it.
    cgroup = tmp_path / "cgroup"
    (cgroup / "job").mkdir(parents=True)
    (cgroup / "job" / "memory.max").write_text(f"{1 << 20}\n")
    (cgroup / "job" / "memory.current").write_text("0\n")
    (tmp_path / "self-cgroup").write_text("0::/job\n")
    monkeypatch.setattr(memory_module, "CGROUP_ROOT", cgroup)
    monkeypatch.setattr(memory_module, "PROC_CGROUP", tmp_path / "self-cgroup")
    with pytest.warns(RuntimeWarning) as caught:
        src = FileSource(tmp_path, format="npy", in_flight=64)
    assert str(caught[0].message) == (
        "FileSource: in_flight=64 whole files of up to 65.7 kB may hold 4.2 MB, more than "
        "the 1.0 MB of memory available here (the container's limit: "
        f"{cgroup}/job/memory.max = 1,048,576 bytes, 0 of them in use): a run that fills "
        "its read-ahead is killed by the kernel without a word; give in_flight=7 or less, "
        "or leave it out (the default holds 524.3 kB at most: half the memory available)"
    )
    assert src.in_flight == 64  # as asked: a warning, not a refusal
    src.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # within memory, or the default: no word
        FileSource(tmp_path, format="npy", in_flight=8).close()
        FileSource(tmp_path, format="npy").close()
