"""HDF5 as climate and physics codes write it (session 52's journey), read by FileSource and
compared, sample by sample, with h5py's reading of the same file: gzip + shuffle and lzf
chunks that do not align with samples, fletcher32, a fill value, a resizable first axis
written in appends, inputs and targets as two datasets, both libvers; and the refusals."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import FileSource
from headrace.formats._hdf5 import decode_hdf5
from headrace.pipeline import Loader

SHAPE = (16, 16, 5)  # a sample: a 16x16 field of 5 variables
COUNTS = (21, 13)  # samples a file: not multiples of any chunk's rows
DATASETS = ("fields/inputs", "fields/targets")


def _fields(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (n, *SHAPE)).astype(np.float32)
    return x, (x[..., 0] + x[..., 1] ** 2).astype(np.float32)


def _write(path: Path, kind: str, libver: str | None, n: int, seed: int) -> None:
    x, t = _fields(n, seed)
    with h5py.File(path, "w", libver=libver) as f:
        f.attrs["dt_hours"] = 6.0
        g = f.create_group("fields")
        if kind == "gzip":  # gzip level 4 with shuffle; chunks of 4 samples and a partial last
            gzip: dict[str, Any] = {"compression": "gzip", "compression_opts": 4, "shuffle": True}
            g.create_dataset("inputs", data=x, chunks=(4, *SHAPE), fillvalue=-999.0, **gzip)
            g.create_dataset("targets", data=t, chunks=(4, *SHAPE[:2]), **gzip)
        elif kind == "lzf":  # a sample split over 4 chunks
            g.create_dataset("inputs", data=x, chunks=(1, 8, 8, 5), compression="lzf")
            g.create_dataset("targets", data=t, chunks=(1, 8, 8), compression="lzf")
        else:  # appended 3 rows at a time, over-allocated, trimmed at the end; fletcher32
            opts: dict[str, Any] = {"compression": "gzip", "fletcher32": True, "dtype": "f4"}
            xi = g.create_dataset(
                "inputs", shape=(0, *SHAPE), maxshape=(None, *SHAPE), chunks=(4, *SHAPE),
                fillvalue=-999.0, shuffle=True, **opts,
            )  # fmt: skip
            ti = g.create_dataset(
                "targets", shape=(0, *SHAPE[:2]), maxshape=(None, *SHAPE[:2]),
                chunks=(1, 8, 16), fillvalue=np.nan, **opts,
            )  # fmt: skip
            for a in range(0, n, 3):
                b = min(a + 3, n)
                if xi.shape[0] < b:
                    xi.resize(-(-b // 8) * 8, axis=0)
                    ti.resize(-(-b // 8) * 8, axis=0)
                xi[a:b], ti[a:b] = x[a:b], t[a:b]
            xi.resize(n, axis=0)
            ti.resize(n, axis=0)


@pytest.mark.parametrize("libver", [None, "latest"])
@pytest.mark.parametrize("kind", ["gzip", "lzf", "appended"])
@pytest.mark.parametrize("shuffle", ["samples", "files"])
def test_science_files_read_as_h5py_reads_them(
    tmp_path: Path, kind: str, libver: str | None, shuffle: str
) -> None:
    for i, n in enumerate(COUNTS):
        _write(tmp_path / f"run{i}.h5", kind, libver, n, seed=i)
    want = []
    for i in range(len(COUNTS)):
        with h5py.File(tmp_path / f"run{i}.h5") as f:
            want.append([f[d][()] for d in DATASETS])
    src = FileSource(
        tmp_path, format="hdf5", datasets=DATASETS, samples_per_file="header",
        shuffle=shuffle, hdf5_local_ranges_above=0,  # read by ranges, as large files are
    )  # fmt: skip
    seen = set()
    with Loader(src, batch_size=5, seed=1, steps=7) as loader:  # 35 samples of 34: an epoch
        for batch in loader:
            files, rows = src.file_item(batch["index"])
            for j, (f, r) in enumerate(zip(files.tolist(), rows.tolist(), strict=True)):
                for d, arr in zip(DATASETS, want[f], strict=True):
                    np.testing.assert_array_equal(batch[d][j], arr[r])
                seen.add((f, r))
    assert len(seen) == sum(COUNTS)


def _unloaded_filter_file(path: Path, code: int) -> None:
    """A dataset whose chunks went through filter ``code``, which this process has not
    loaded, its pipeline naming no filter (as a writer that had not registered it
    writes it); the chunks' bytes stand in for the filter's output."""
    x = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    with h5py.File(path, "w") as f:
        ds = f.create_dataset(
            "x", shape=x.shape, dtype="f4", chunks=(4, 4), compression=code,
            allow_unknown_filter=True,
        )  # fmt: skip
        for a in (0, 4):
            ds.id.write_direct_chunk((a, 0), x[a : a + 4].tobytes())


@pytest.mark.parametrize(("code", "named"), [(305, "LZO"), (32019, "JPEG"), (32020, "VBZ")])
def test_a_plugin_filter_not_loaded_is_named_by_its_registered_id(
    tmp_path: Path, code: int, named: str
) -> None:
    # The file stored no name for the filter: the message said "filter 305 ('')",
    # leaving the reader to look up which plugin to install. (Ids hdf5plugin does not
    # ship: where it is installed, it is imported for the others, see below.)
    _unloaded_filter_file(tmp_path / "a.h5", code)
    assert not h5py.h5z.filter_avail(code)
    with pytest.raises(FormatError, match=rf"filter {code} \({named}\).*hdf5plugin") as got:
        decode_hdf5((tmp_path / "a.h5").read_bytes(), name="a.h5", dataset="x", index=1)
    assert "''" not in str(got.value)


def test_a_flipped_bit_in_a_gzip_chunk_fails_its_read_and_no_other(tmp_path: Path) -> None:
    # zlib's Adler-32 checks every deflated chunk (formats.md: "gzip catches a changed
    # byte"): the chunk's samples are refused by name, the others still read.
    _write(tmp_path / "run0.h5", "gzip", None, 21, seed=0)
    with h5py.File(tmp_path / "run0.h5") as f:
        info = f["fields/inputs"].id.get_chunk_info_by_coord((8, 0, 0, 0))
        want = f["fields/inputs"][()]
    data = bytearray((tmp_path / "run0.h5").read_bytes())
    rng = np.random.default_rng(0)
    for _ in range(8):
        bad = bytearray(data)
        bad[info.byte_offset + int(rng.integers(info.size))] ^= 1 << int(rng.integers(8))
        with pytest.raises(FormatError, match=r"the chunk of samples \[8, 12\)"):
            decode_hdf5(bytes(bad), name="run0.h5", dataset="fields/inputs", index=[3, 9])
        got = decode_hdf5(bytes(bad), name="run0.h5", dataset="fields/inputs", index=[3, 12])
        np.testing.assert_array_equal(got, want[[3, 12]])


# A stand-in for hdf5plugin (not installed here): importing it registers filter 32024 (SZ3's
# id) as a pass-through, through HDF5's own H5Zregister, as hdf5plugin registers its filters.
FAKE_HDF5PLUGIN = r"""
import ctypes, re
import h5py

_LIB = re.compile(r"/\S*/libhdf5(_serial)?(-[0-9a-f]+)?\.so\S*")  # not libhdf5_hl
with open("/proc/self/maps") as maps:
    _lib = next(m[0] for line in maps if (m := _LIB.search(line)))
_FUNC = ctypes.CFUNCTYPE(
    ctypes.c_size_t, ctypes.c_uint, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint),
    ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_void_p),
)
class _Class2(ctypes.Structure):  # H5Z_class2_t
    _fields_ = [
        ("version", ctypes.c_int), ("id", ctypes.c_int), ("encoder_present", ctypes.c_uint),
        ("decoder_present", ctypes.c_uint), ("name", ctypes.c_char_p),
        ("can_apply", ctypes.c_void_p), ("set_local", ctypes.c_void_p), ("filter", _FUNC),
    ]
_pass = _FUNC(lambda flags, n, values, nbytes, size, buf: nbytes)
_class = _Class2(1, 32024, 1, 1, b"pass-through", None, None, _pass)
assert ctypes.CDLL(_lib).H5Zregister(ctypes.byref(_class)) >= 0
"""


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="finds libhdf5 in /proc")
def test_hdf5plugin_installed_but_not_imported_is_imported_for_its_filters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A HeadraceDataLoader worker started from a notebook (or `python -c`) imports no
    # main module: the user's `import hdf5plugin` ran in the parent alone, and every
    # Blosc or bitshuffle chunk was refused in the workers, saying to import hdf5plugin.
    _unloaded_filter_file(tmp_path / "a.h5", 32024)
    if h5py.h5z.filter_avail(32024):
        pytest.skip("filter 32024 is registered in this process already")
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "hdf5plugin.py").write_text(FAKE_HDF5PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    monkeypatch.delitem(sys.modules, "hdf5plugin", raising=False)
    try:
        got = decode_hdf5((tmp_path / "a.h5").read_bytes(), name="a.h5", dataset="x", index=1)
    finally:
        sys.modules.pop("hdf5plugin", None)
    np.testing.assert_array_equal(got, np.arange(4, 8, dtype=np.float32))


def test_a_filter_hdf5plugin_lacks_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _unloaded_filter_file(tmp_path / "a.h5", 32020)
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "hdf5plugin.py").write_text("version = '9.9'\n")
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    monkeypatch.delitem(sys.modules, "hdf5plugin", raising=False)
    try:
        with pytest.raises(FormatError, match=r"filter 32020 \(VBZ\).*hdf5plugin 9\.9 .*lacks it"):
            decode_hdf5((tmp_path / "a.h5").read_bytes(), name="a.h5", dataset="x", index=1)
    finally:
        sys.modules.pop("hdf5plugin", None)
