"""Mixtures (and filtered sources) of fixed-width strings whose widths differ.

A source makes NumPy strings (``U``, ``S``, or records with such fields) as wide as
the values it read: a table's text decoded by a ``Mapped`` fn is as wide as each read's
longest text, a file dataset's keys as its longest key, a file of strings as it was
stored. The mixture compared every read's dtype with the first it saw, so it refused
another width (even its one source's next read), and ``merge_parts`` made a read's
array of its first part's dtype, cutting a wider part's strings. Filtered refused
stand-ins read at another width. Now strings of one kind are as wide as the widest
part of a read, and the Loader gives each step its own width (``narrow_strings``);
bytes beside text are refused, naming both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace._shm_ring import RingConfig, WorkerBatches
from headrace.errors import DataError
from headrace.formats import FileSource, TableSource, encode_npy
from headrace.pipeline import Filtered, Loader, Mapped, Mixture
from headrace.pipeline._mixture import source_seed
from headrace.pipeline._mixture_ragged import merge_parts
from headrace.testing import assert_resume_exact, batch_digest

B = 4
SHORT = [("ab" * 3)[: 1 + i % 5] for i in range(24)]  # 1 to 5 characters
LONG = ["é" * (3 + i % 9) + str(i) for i in range(24)]  # 4 to 13, not ASCII


def _table(root: Path, name: str, texts: list[str], width: int) -> TableSource:
    """A Parquet table of ``texts`` and each row's number (``label``), 8-row groups."""
    path = root / f"{name}.parquet"
    pq.write_table(
        pa.table({"text": texts, "label": np.arange(len(texts))}), path, row_group_size=8
    )
    return TableSource(path, widths={"text": width}, window_rows=8)


def decode(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """A table's text bytes as NumPy strings, as wide as this read's longest (module
    level: worker processes import it): text, its bytes, a label name and a record."""
    texts = [bytes(r[m]).decode() for r, m in zip(arrays["text"], arrays["text_mask"], strict=True)]
    text = np.array(texts, dtype=str)
    name = np.array([f"row{int(i)}" for i in arrays["label"]], dtype=str)
    return {
        "text": text,
        "raw": np.array([t.encode() for t in texts], dtype=bytes),
        "name": name,
        "rec": np.rec.fromarrays([name, arrays["label"]], names="n,i"),
        "label": arrays["label"],
    }


def as_bytes(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """``decode`` with the text as UTF-8 bytes (``S``), not text."""
    out = decode(arrays, samples)
    out["text"] = out["raw"]
    return out


def _texts(root: Path) -> list[Mapped]:
    return [
        Mapped(_table(root, "short", SHORT, 8), decode),
        Mapped(_table(root, "long", LONG, 32), decode),
    ]


def _run(src: Any, steps: int = 12, **kw: Any) -> list[dict[str, Any]]:
    opts: dict[str, Any] = {"batch_size": B, "seed": 5, "steps": steps, "prefetch": 0}
    opts.update(kw)
    with Loader(src, **opts) as ld:
        return list(ld)


def _widest(values: list[Any]) -> int:
    return max(1, *(len(v) for v in values))


def _check_alone(mix: Mixture, batches: list[dict[str, Any]], seed: int = 5) -> None:
    """Each step's samples are what their source gives alone for them (read with its
    own seed and local numbers), and each string key as wide as the step's longest."""
    for t, batch in enumerate(batches):
        source, local = mix.locate(seed, t * B + np.arange(B, dtype=np.int64))
        assert batch["source"].tolist() == source.tolist()
        for s, sub in enumerate(mix.sources):
            idx = np.flatnonzero(source == s)
            if not idx.size:
                continue
            alone = sub.read(source_seed(seed, s), local[idx])
            for k, v in alone.items():
                assert batch[k][idx].tolist() == v.tolist(), (t, s, k)
        for k, v in batch.items():
            if v.dtype.kind in "US":
                want = f"{v.dtype.str[:2]}{_widest(v.tolist())}"
                assert v.dtype.str == want, (t, k)


def test_tables_of_text_of_several_widths_mix(tmp_path: Path) -> None:
    # Refused: "mixture sources differ in dtype: '1' gives {text: <U9 ...} but '0' gives
    # {text: <U1 ...}".
    mix = Mixture(_texts(tmp_path), [1, 1], batch_size=B)
    got = _run(mix)
    assert {int(s) for b in got for s in b["source"]} == {0, 1}
    _check_alone(mix, got)
    for b in got:
        rows = zip(b["source"].tolist(), b["label"].tolist(), strict=True)
        assert b["text"].tolist() == [LONG[i] if s else SHORT[i] for s, i in rows]
        assert b["rec"].dtype.names == ("n", "i")
        assert b["rec"]["n"].tolist() == b["name"].tolist()
    assert len({b["text"].dtype for b in got}) > 2  # each step its own width


def test_one_source_whose_reads_differ_in_width_mixes(tmp_path: Path) -> None:
    # Its second read (a chunk with a longer text) was refused as differing from its own
    # first: "'0' gives {text: <U3 ()} but '0' gives {text: <U1 ()}".
    src = _texts(tmp_path)[0]
    mix = Mixture({"only": src}, [1], batch_size=B)
    got = _run(mix, chunk_steps=2)
    _check_alone(mix, got)  # its own seed (source 0's): not the steps it gives alone
    assert len({b["text"].dtype for b in got}) > 2


def test_merge_parts_makes_the_widest_part_fit() -> None:
    # The output was of the first part's dtype: the second part's "abcdefghijkl" came out
    # "abcde", silently.
    rec = np.dtype([("n", "<U3"), ("i", "<i8")])
    wide_rec = np.dtype([("n", "<U7"), ("i", "<i8")])
    parts = [
        (
            np.array([0, 2]),
            {
                "u": np.array(["ab", "cde"]),
                "s": np.array([b"x", b"yz"]),
                "r": np.array([("a", 1), ("bcd", 2)], rec),
                "p": np.array([["a", "b"], ["c", "d"]]),
            },
        ),
        (
            np.array([1, 3]),
            {
                "u": np.array(["abcdefghijkl", "f"]),
                "s": np.array([b"wxyz12", b""]),
                "r": np.array([("efghijk", 3), ("l", 4)], wide_rec),
                "p": np.array([["efg", "h"], ["i", "jklm"]]),
            },
        ),
    ]
    out = merge_parts(4, parts, ())
    assert out["u"].tolist() == ["ab", "abcdefghijkl", "cde", "f"]
    assert out["u"].dtype == np.dtype("<U12")
    assert out["s"].tolist() == [b"x", b"wxyz12", b"yz", b""]
    assert out["r"].dtype == wide_rec
    assert out["r"].tolist() == [("a", 1), ("efghijk", 3), ("bcd", 2), ("l", 4)]
    assert out["p"].tolist() == [["a", "b"], ["efg", "h"], ["c", "d"], ["i", "jklm"]]
    # A key whose samples may differ (a file's array): stacked parts of strings of one
    # kind are one array, not samples apart.
    out = merge_parts(4, parts, ("u", "s"))
    assert out["u"].dtype == np.dtype("<U12") and "u_shape" not in out
    # Anything else that differs is not widened: refused, naming the key.
    ints = [(np.array([0]), {"x": np.array([1], np.int32)}), (np.array([1]), {"x": np.array([2])})]
    with pytest.raises(DataError, match=r"'x'.*int32.*int64"):
        merge_parts(2, ints, ())


def test_file_keys_of_two_datasets_mix(tmp_path: Path) -> None:
    # Each dataset's keys are as wide as its longest: <U7 and <U13 were refused as
    # differing in dtype.
    srcs = []
    for name, digits in (("short", 3), ("long", 9)):
        folder = tmp_path / name
        folder.mkdir()
        for i in range(16):
            (folder / f"{i:0{digits}d}.npy").write_bytes(encode_npy(np.array(i)))
        src = FileSource(folder, format="npy")
        srcs.append(Mapped(src, Keyed(src)))
    mix = Mixture(srcs, [1, 1], batch_size=B)
    got = _run(mix, steps=8)
    _check_alone(mix, got)
    for b in got:
        digits = [9 if s else 3 for s in b["source"].tolist()]
        want = [f"{int(x):0{d}d}.npy" for x, d in zip(b["data"], digits, strict=True)]
        assert b["key"].tolist() == want
    for src in srcs:
        src.close()


class Keyed:
    """A FileSource's batch with each sample's file key (module level, picklable)."""

    def __init__(self, src: FileSource) -> None:
        self.keys = np.asarray(src.files.keys)  # as wide as the longest key
        self.src = src

    def __call__(self, arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
        files, _ = self.src.file_item(arrays["index"])
        return {"data": arrays["data"], "key": self.keys[files]}


def _string_files(root: Path, width: int, fmt: str) -> FileSource:
    """Files of 10 strings each, stored ``width`` wide (``U``; HDF5: ``S``)."""
    root.mkdir()
    for i in range(3):
        names = np.array([f"{width}" * (j % 3) for j in range(10)], dtype=f"<U{width}")
        if fmt == "npy":
            (root / f"{i}.npy").write_bytes(encode_npy(names))
        else:
            from headrace.formats import encode_hdf5

            (root / f"{i}.h5").write_bytes(encode_hdf5({"data": names.astype(f"S{width}")}))
    opts: dict[str, Any] = {"datasets": ("data",)} if fmt == "hdf5" else {}
    return FileSource(root, format=fmt, samples_per_file=10, **opts)


@pytest.mark.parametrize("fmt", ["npy", "hdf5"])
def test_files_of_strings_stored_at_two_widths_mix_stacked(tmp_path: Path, fmt: str) -> None:
    # Each dataset alone gives its strings stacked; mixed, every step came out as an
    # object array of 0-d strings beside data_shape (B, 0).
    if fmt == "hdf5":
        pytest.importorskip("h5py", reason="h5py is an optional extra")
    srcs = [_string_files(tmp_path / str(w), w, fmt) for w in (5, 12)]
    mix = Mixture(srcs, [1, 1], batch_size=B)
    got = _run(mix, steps=6, chunk_steps=3)
    assert all("data_shape" not in b and b["data"].dtype.kind in "US" for b in got)
    _check_alone(mix, got)
    for src in srcs:
        src.close()


def keep_long(arrays: dict[str, Any], samples: Any) -> Any:
    """Rows whose text has 3 characters or more (module level)."""
    return np.char.str_len(arrays["text"]) >= 3


def test_filtered_stand_ins_of_another_width(tmp_path: Path) -> None:
    # The stand-ins' read (wider) was refused: "the stand-ins' read gave 'raw' as |S3 of
    # per-sample shape (), the first read as |S2 ...".
    short, long_ = _texts(tmp_path)
    flt = Filtered(short, keep_long)
    got = _run(flt, steps=10)
    assert flt.replaced > 0
    for b in got:
        assert b["text"].tolist() == [SHORT[i] for i in b["label"]]
        assert min(len(t) for t in b["text"].tolist()) >= 3
        assert b["text"].dtype.str == f"<U{_widest(b['text'].tolist())}"
    mix = Mixture({"short": flt, "long": long_}, [1, 1], batch_size=B)
    mixed = _run(mix, steps=10)
    _check_alone(mix, mixed)


def test_bytes_beside_text_are_refused_naming_both(tmp_path: Path) -> None:
    # Before, the plain "differ in dtype", whose way out (Mapped) did not say what to do:
    # NumPy would decode the bytes as ASCII, failing at the first that is not.
    short = Mapped(_table(tmp_path, "short", SHORT, 8), decode)
    raw = Mapped(_table(tmp_path, "long", LONG, 32), as_bytes)
    mix = Mixture({"text": short, "bytes": raw}, [1, 1], batch_size=B)
    said = r"(?s)'text' is bytes \(S\) in 'bytes' and text \(U\) in 'text'.*decode"
    with pytest.raises(DataError, match=said):
        _run(mix)


def _digests(make: Any) -> dict[str, str]:
    out = {}
    for chunk, prefetch in [(1, 0), (3, 0), (8, 4), (4, 2)]:
        out[f"chunk {chunk} prefetch {prefetch}"] = batch_digest(
            _run(make(), chunk_steps=chunk, prefetch=prefetch)
        )
    return out


def test_steps_are_alike_whatever_the_chunk_prefetch_workers_and_resume(tmp_path: Path) -> None:
    def make() -> Mixture:
        return Mixture(_texts(tmp_path), [1, 2], batch_size=B)

    want = _run(make(), chunk_steps=1)
    dtypes = [{k: v.dtype.str for k, v in b.items()} for b in want]
    assert set(_digests(make).values()) == {batch_digest(want)}
    for workers in (1, 2):
        opts = {"batch_size": B, "seed": 5, "steps": 12, "prefetch": 0, "chunk_steps": 3}
        wb = WorkerBatches(RingConfig(source=make(), loader=opts, workers=workers, slots=2))
        got = list(wb)
        assert [{k: v.dtype.str for k, v in b.items()} for b in got] == dtypes
        assert batch_digest(got) == batch_digest(want), workers
    assert_resume_exact(
        lambda: Loader(make(), batch_size=B, seed=5, steps=12, chunk_steps=4),
        steps=12,
        resume_at=[1, 5, 9],
    )
    with Loader(make(), batch_size=B, seed=5, steps=12, prefetch=0) as ld:
        assert batch_digest(ld.batch_at(t) for t in range(12)) == batch_digest(want)
