"""A local Megatron index's document starts are looked up in a map of it, not made into
an array: the same positions, a bounded memory whatever the index's size."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import TokenSource, _megatron_starts, open_token_file, read_megatron_index
from headrace.formats._megatron import write_megatron_index
from headrace.formats._megatron_starts import STEP, MappedStarts, mapped_starts
from headrace.formats._positions import document_positions
from headrace.io import LocalFile
from headrace.pipeline import Loader


def _pair(d: Path, lengths: np.ndarray, docs: np.ndarray | None = None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "m.bin", "wb") as f:
        f.truncate(2 * int(lengths.sum()))  # sparse: zeros cost no blocks
    write_megatron_index(d / "m.idx", np.uint16, lengths, docs)
    return d / "m.bin"


def _starts(path: Path) -> MappedStarts:
    tf = open_token_file(path)
    got = tf.document_starts()
    assert isinstance(got, MappedStarts)
    return got


@pytest.mark.parametrize("n", [0, 1, STEP - 1, STEP, STEP + 1, 3 * STEP + 5])
def test_searched_and_taken_as_the_array(tmp_path: Path, n: int) -> None:
    rng = np.random.default_rng(n)
    # Empty sequences (first and last too), several sequences a document, empty documents.
    lengths = rng.integers(0, 4, 2 * n + 3).astype(np.int32)
    lengths[0] = lengths[-1] = 0
    cuts = np.sort(rng.integers(0, len(lengths) + 1, n))
    docs = np.concatenate(([0], cuts, [len(lengths)])).astype(np.int64)
    path = _pair(tmp_path, lengths, docs)
    want = open_token_file(path).documents()[:-1]
    starts = _starts(path)
    assert len(starts) == len(want)
    total = int(lengths.sum())
    tokens = np.concatenate((np.arange(-1, total + 3), rng.integers(0, total + 1, 50)))
    for side in ("left", "right"):
        got = starts.search(tokens, side)  # type: ignore[arg-type]
        assert np.array_equal(got, np.searchsorted(want, tokens, side=side)), side  # type: ignore[call-overload]
    assert np.array_equal(starts.take(np.arange(len(want))), want)


def test_batches_as_from_the_array(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lengths = (np.arange(20_000, dtype=np.int64) * 7919 % 79 + 1).astype(np.int32)
    path = _pair(tmp_path, lengths)

    def run() -> list[np.ndarray]:
        src = TokenSource(path, context=64, positions="documents")
        with Loader(src, batch_size=16, seed=3, prefetch=0) as ld:
            it = iter(ld)
            return [next(it)["position_ids"] for _ in range(20)]

    mapped = run()
    monkeypatch.setattr(_megatron_starts, "mapped_starts", lambda _index: None)
    monkeypatch.setattr("headrace.formats._tokens.mapped_starts", lambda _index: None)
    arrays = run()  # the array, as before
    assert all(np.array_equal(a, b) for a, b in zip(mapped, arrays, strict=True))
    assert sum(int((p == 0).sum()) for p in mapped) > 20 * 16  # documents start inside rows


def test_memory_does_not_grow_with_the_documents(tmp_path: Path) -> None:
    # Made as an array, the starts of 50M documents held 400 MB in each process (1.6 GB
    # at the peak of making them); of 1M here, 8.0 MB held and 32 MB at the peak of the
    # first read (measured), where the map's samples are 2 x 15,625 entries of 8 bytes
    # and the read's blocks 150 rows x 4 searches x 512 bytes.
    path = _pair(tmp_path, np.full(1_000_000, 3, dtype=np.int32))
    src = TokenSource(path, context=8, positions="documents")
    rows = np.arange(0, 150_000, 1_000, dtype=np.int64)
    tracemalloc.start()
    try:
        batch = src.read(0, rows)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 1 << 20
    assert peak < 3 << 20
    _, offsets = src._file_offsets(src._plan(0, rows))
    col = np.arange(8)
    # Documents of 3 tokens: a row counts from 0 until the first start after its column 0.
    want = np.where(col < -offsets[:, None] % 3, col, (offsets[:, None] + col) % 3)
    assert np.array_equal(batch["position_ids"], want)
    assert isinstance(src._bounds[0], MappedStarts)
    src.close()
    assert src._bounds == {}  # the map let go


def test_an_index_changed_under_its_map_is_refused(tmp_path: Path) -> None:
    lengths = np.full(3 * STEP, 5, dtype=np.int32)
    path = _pair(tmp_path, lengths)
    src = TokenSource(path, context=8, positions="documents")
    rows = np.arange(4, dtype=np.int64)
    first = src.read(0, rows)["position_ids"]
    idx = path.with_suffix(".idx")
    with open(idx, "r+b") as f:  # cut short in place: a read through the map is SIGBUS
        f.truncate(100)
    with pytest.raises(FormatError, match=r"m\.idx: changed since it was opened"):
        src.read(0, rows)
    write_megatron_index(idx, np.uint16, lengths)  # back as it was, but another file
    with pytest.raises(FormatError, match=r"m\.idx: changed since it was opened"):
        src.read(0, rows)
    os.remove(idx)
    with pytest.raises(FormatError, match=r"m\.idx: changed since it was opened \(stat"):
        src.read(0, rows)
    assert first.shape == (4, 8)


def test_an_index_changed_before_its_map_is_refused(tmp_path: Path) -> None:
    path = _pair(tmp_path, np.full(10, 5, dtype=np.int32))
    tf = open_token_file(path)
    write_megatron_index(path.with_suffix(".idx"), np.uint16, np.full(10, 5, dtype=np.int32))
    os.utime(path.with_suffix(".idx"), ns=(1, 1))
    with pytest.raises(FormatError, match=r"m\.idx: changed since it was opened"):
        tf.document_starts()


def test_a_network_mount_reads_the_array(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A page the storage fails to read through a map is SIGBUS: not mapped there.
    path = _pair(tmp_path, np.full(10, 5, dtype=np.int32))
    tf = open_token_file(path)
    assert tf.index is not None
    monkeypatch.setattr(LocalFile, "network", property(lambda _self: True))
    assert mapped_starts(tf.index) is None  # type: ignore[arg-type]
    got = tf.document_starts()
    assert isinstance(got, np.ndarray)
    assert got.tolist() == list(range(0, 50, 5))
    positions = document_positions(got, np.array([3], dtype=np.int64), 8)
    assert positions.tolist() == [[0, 1, 0, 1, 2, 3, 4, 0]]


@pytest.mark.parametrize("n", [0, 1, 7, 300])
def test_bounds_made_in_place_as_parsed_whole(tmp_path: Path, n: int) -> None:
    rng = np.random.default_rng(100 + n)
    lengths = rng.integers(0, 4, 2 * n + 3).astype(np.int32)
    lengths[-1] = 0  # empty last sequences and documents: entries equal to S
    cuts = np.sort(rng.integers(0, len(lengths) + 1, n))
    docs = np.concatenate(([0], cuts, [len(lengths)] * 3)).astype(np.int64)
    path = _pair(tmp_path, lengths, docs)
    whole = read_megatron_index(path.with_suffix(".idx"), path.stat().st_size)
    assert open_token_file(path).documents().tolist() == whole.document_bounds().tolist()


def test_bounds_peak_at_what_is_read(tmp_path: Path) -> None:
    # 1M documents: the pointers and the entries read (16 MB) were joined by three arrays
    # as large (40 MB at the peak; 50M documents: 1.5 GB); the bounds now overwrite the
    # entries.
    path = _pair(tmp_path, np.full(1_000_000, 3, dtype=np.int32))
    tf = open_token_file(path)
    tracemalloc.start()
    try:
        bounds = tf.documents()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 17 << 20
    assert np.array_equal(bounds, np.arange(0, 3_000_001, 3))
