"""A string field's dtype is its step's, whatever chunk read it.

A source (or a transform) that makes fixed-width strings from a chunk's values at
once, ``np.array(names)``, gives them the width of the chunk's longest: split into
steps, one step came out ``<U3`` read alone and ``<U5`` read in a chunk of 4 with a
longer name (the values equal, the dtype and so the digest not). Each step's strings
now come out as wide as its own longest value (at least 1), as ``np.array`` of that
step alone makes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace._shm_ring import RingConfig, WorkerBatches
from headrace.formats import FileSource, encode_hdf5, encode_npy
from headrace.pipeline import Loader
from headrace.pipeline._layout import split_chunk
from headrace.testing import batch_digest

N = 40


def _names(root: Path) -> Path:
    """A text file of one name a line, 1 to 5 characters long (non-ASCII too)."""
    path = root / "names.txt"
    path.write_text("\n".join("xé"[i % 2] * (1 + (i * 7) % 5) for i in range(N)), "utf-8")
    return path


class Names:
    """The names of a text file's lines as NumPy strings, made from each read's lines at
    once (module level: worker processes import it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": "names-test", "path": str(self.path)}

    def __len__(self) -> int:
        return N

    def read(self, seed: int, samples: Any) -> dict[str, Any]:
        lines = self.path.read_text("utf-8").split("\n")
        s = np.asarray(samples, dtype=np.int64)
        names = [lines[i] for i in s.tolist()]
        masked = np.ma.masked_array(np.array(names), mask=s % 3 == 0)
        return {
            "name": np.array(names),
            "raw": np.array([n.encode() for n in names]),  # |S: bytes of several lengths
            "pair": np.array([[n, n[:1]] for n in names]),  # (B, 2) strings
            "masked": masked,
            "rec": np.rec.fromarrays([np.array(names), s], names="n,i"),  # a record's field
            "obj": np.array(names, dtype=object),
            "i": s,
        }


class PlainNames(Names):
    """Names without the ``object`` field, so a worker's chunks cross the ring's slots
    (a chunk of Python objects is pickled)."""

    def read(self, seed: int, samples: Any) -> dict[str, Any]:
        out = super().read(seed, samples)
        del out["obj"]
        return out


def _run(src: Any, chunk: int, **kw: Any) -> list[dict[str, Any]]:
    opts: dict[str, Any] = {"batch_size": 2, "seed": 3, "steps": 12, "prefetch": 0}
    opts.update(kw)
    with Loader(src, chunk_steps=chunk, **opts) as ld:
        return list(ld)


def _dtypes(batches: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{k: v.dtype.str for k, v in b.items()} for b in batches]


def test_a_steps_strings_are_as_wide_as_its_own_whatever_the_chunk(tmp_path: Path) -> None:
    src = Names(_names(tmp_path))
    alone = _run(src, 1)
    for b in alone:  # read alone, a step's strings are as wide as its longest
        assert b["name"].dtype.str == f"<U{max(len(n) for n in b['name'].tolist())}"
    want = batch_digest(alone)
    assert len({b["name"].dtype for b in alone}) > 1  # the steps differ in width
    for chunk, prefetch in [(3, 0), (8, 0), (8, 4), (4, 2)]:
        got = _run(src, chunk, prefetch=prefetch)
        assert _dtypes(got) == _dtypes(alone), (chunk, prefetch)
        assert batch_digest(got) == want, (chunk, prefetch)
    # The values, masks and types are the read's.
    got = _run(src, 8)
    for g, a in zip(got, alone, strict=True):
        assert g["name"].tolist() == a["name"].tolist()
        assert g["raw"].tolist() == a["raw"].tolist()
        assert isinstance(g["masked"], np.ma.MaskedArray)
        assert isinstance(g["rec"], np.recarray) and g["rec"].dtype == a["rec"].dtype
        assert g["rec"].n.tolist() == a["name"].tolist()
        assert np.array_equal(np.ma.getmaskarray(g["masked"]), np.ma.getmaskarray(a["masked"]))
        assert g["obj"].dtype == object and g["obj"].tolist() == a["obj"].tolist()


def test_a_transforms_strings_are_as_wide_as_the_steps_own(tmp_path: Path) -> None:
    # A transform is called on a chunk's rows at once: names made from them were as
    # wide as the chunk's longest.
    for i in range(N):
        (tmp_path / f"{i:02d}.npy").write_bytes(encode_npy(np.array(i * 7 % 120)))

    def label(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
        return {**arrays, "label": np.array([f"n{int(x)}" for x in arrays["data"]])}

    runs = [
        _run(FileSource(tmp_path, format="npy"), c, transform=label, batch_size=3)
        for c in (1, 3, 8)
    ]
    assert len({b["label"].dtype for b in runs[0]}) > 1
    assert _dtypes(runs[1]) == _dtypes(runs[0]) == _dtypes(runs[2])
    assert len({batch_digest(r) for r in runs}) == 1


def test_split_narrows_only_what_its_values_leave_unused() -> None:
    # Trailing NULs are no part of a NumPy string's value; inner ones are, and kept.
    a = np.array([b"a\x00b", b"cd", b"e", b"", b"fgh\x00\x00"], dtype="S6")
    u = np.array(["ab", "", "c", "", "", ""], dtype="<U9")
    empty = np.zeros((6, 0), dtype="<U4")  # no values: no width to find
    arrays = {"a": np.concatenate([a, a[:1]]), "u": u, "e": empty, "z": np.ndarray(6, "<U0")}
    out = [b for _, b in split_chunk([0, 1, 2], arrays, 2)]
    assert [b["a"].dtype.str for b in out] == ["|S3", "|S1", "|S3"]
    assert [b["u"].dtype.str for b in out] == ["<U2", "<U1", "<U1"]  # "" alone: width 1
    assert [b["e"].dtype.str for b in out] == ["<U4"] * 3
    assert [b["z"].dtype.str for b in out] == ["<U0"] * 3
    assert b"".join(x for b in out for x in b["a"].tolist()) == b"a\x00bcdefgha\x00b"
    assert [x for b in out for x in b["u"].tolist()] == u.tolist()
    # A step already as narrow as its values is handed out as the chunk's view.
    same = {"u": np.array(["ab", "cd", "e", "f"])}
    first = split_chunk([0, 1], same, 2)[0][1]["u"]
    assert np.shares_memory(first, same["u"])


@pytest.mark.parametrize("byteorder", ["<", ">"])
def test_strings_keep_their_byte_order(byteorder: str) -> None:
    u = np.array(["abc", "d", "ef", "g"], dtype=f"{byteorder}U5")
    out = [b for _, b in split_chunk([0, 1], {"u": u}, 2)]
    assert [b["u"].dtype.str for b in out] == [f"{byteorder}U3", f"{byteorder}U2"]
    assert [x for b in out for x in b["u"].tolist()] == u.tolist()


def test_records_narrow_as_numpy_lays_them_out_and_keep_a_files_offsets() -> None:
    nested = np.dtype([("p", "<U4", (2,)), ("q", [("s", "S5"), ("x", "<f4")])])
    aligned = np.dtype([("x", "<i8"), ("n", "<U4"), ("c", "u1")], align=True)
    gapped = np.dtype({"names": ["a", "n"], "formats": ["u1", "<U4"], "offsets": [0, 8]})
    a, b, c = np.zeros(4, nested), np.zeros(4, aligned), np.zeros(4, gapped)
    a["p"], a["q"]["s"], b["n"], c["n"] = [["ab", "c"]] * 4, b"xy", "ab", "ab"
    got = {k: split_chunk([0, 1], {k: v}, 2)[0][1][k] for k, v in [("a", a), ("b", b), ("c", c)]}
    assert got["a"].dtype == np.dtype([("p", "<U2", (2,)), ("q", [("s", "S2"), ("x", "<f4")])])
    assert got["b"].dtype == np.dtype([("x", "<i8"), ("n", "<U2"), ("c", "u1")], align=True)
    assert got["b"].dtype.isalignedstruct
    assert got["c"].dtype == gapped  # offsets of its own: kept
    assert got["b"].tolist() == b[:2].tolist() and got["c"].tolist() == c[:2].tolist()
    assert got["a"]["p"].tolist() == a["p"][:2].tolist()
    assert got["a"]["q"].tolist() == a["q"][:2].tolist()


@pytest.mark.parametrize(("kind", "workers"), [(PlainNames, 2), (Names, 1)])
def test_the_worker_ring_gives_each_steps_own_widths(
    tmp_path: Path, kind: type[Names], workers: int
) -> None:
    src = kind(_names(tmp_path))
    want = _run(src, 1)
    opts = {"batch_size": 2, "seed": 3, "steps": 12, "prefetch": 0, "chunk_steps": 4}
    wb = WorkerBatches(RingConfig(source=src, loader=opts, workers=workers, slots=2))
    got = list(wb)
    assert (wb.pickled_chunks == 0) == (kind is PlainNames)  # the slots, or pickled
    assert _dtypes(got) == _dtypes(want)
    assert batch_digest(got) == batch_digest(want)


def _string_files(root: Path, fmt: str) -> FileSource:
    """Files of 20 strings each of 0 to 9 characters, stored wider (12)."""
    for i in range(4):
        names = np.array([f"s{(j + i) % 10}" * (j % 4) for j in range(20)], dtype="<U12")
        if fmt == "npy":
            np.save(root / f"{i}.npy", names)
        else:
            (root / f"{i}.h5").write_bytes(encode_hdf5({"s": names.astype("S12")}))
    opts: dict[str, Any] = {"datasets": ("s",)} if fmt == "hdf5" else {}
    return FileSource(root, format=fmt, samples_per_file=20, **opts)


@pytest.mark.parametrize("fmt", ["npy", "hdf5"])
def test_a_files_strings_come_out_alike_whatever_the_chunk(tmp_path: Path, fmt: str) -> None:
    if fmt == "hdf5":
        pytest.importorskip("h5py", reason="h5py is an optional extra")
    src = _string_files(tmp_path, fmt)
    runs = [_run(src, c, batch_size=4, steps=10) for c in (1, 3, 8)]
    key = "data" if fmt == "npy" else "s"
    assert {b[key].dtype.kind for b in runs[0]} == {"U" if fmt == "npy" else "S"}
    assert _dtypes(runs[1]) == _dtypes(runs[0]) == _dtypes(runs[2])
    assert len({batch_digest(r) for r in runs}) == 1
    src.close()


def test_batch_at_gives_the_iterations_widths(tmp_path: Path) -> None:
    src = _string_files(tmp_path, "npy")
    with Loader(src, batch_size=4, seed=3, steps=4, prefetch=0) as ld:
        assert batch_digest(ld) == batch_digest(ld.batch_at(t) for t in range(4))
    src.close()
