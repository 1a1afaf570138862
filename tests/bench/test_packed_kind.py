"""The packed workload: naive row indexing vs headrace on one plan, group_texts beside them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from headrace.bench._kind import make_kind
from headrace.bench._packed_kind import COLUMN, PAGE, PackedKind
from headrace.bench._runner import RunOptions, run_workload
from headrace.bench._workload import builtin_workloads
from headrace.errors import ConfigError, DataError

TINY_DS = {"rows": 300, "max_len": 60, "batch_rows": 40, "context": 32}
TINY_TRAIN = {"steps": 3, "trials": 2, "warmup_steps": 1, "batch_size": 4}


def _kind(tmp_path: Path, **dataset: int) -> PackedKind:
    wl = builtin_workloads()["packed"].replace(dataset={**TINY_DS, **dataset}, train=TINY_TRAIN)
    kind = make_kind(wl, str(tmp_path))
    assert isinstance(kind, PackedKind)
    kind.generate()
    return kind


def _tokens(kind: PackedKind) -> np.ndarray:
    """Every row's ids, concatenated over the shards, read with pyarrow alone."""
    state = json.loads(Path(kind.path, "state.json").read_text())
    parts = []
    for f in state["_data_files"]:
        table = pa.ipc.open_stream(pa.memory_map(str(Path(kind.path, f["filename"])))).read_all()
        parts += [c.flatten().to_numpy() for c in table.column(COLUMN).chunks]
    return np.concatenate(parts)


def _batches(kind: PackedKind, spec: str, steps: int) -> list[dict[str, np.ndarray]]:
    stream = kind.open(spec, steps)
    try:
        return [{k: np.array(v) for k, v in b.items()} for b in stream]
    finally:
        stream.close()


def test_naive_and_headrace_deliver_the_planned_runs_of_the_concatenation(
    tmp_path: Path,
) -> None:
    kind = _kind(tmp_path)
    tokens = _tokens(kind)
    n = kind.context + 1
    plan = list(kind.plan_chunks(kind.workload.train.seed, 12))
    for spec in ("naive", "headrace-sync", "headrace-async"):
        got = _batches(kind, spec, 12)
        assert len(got) == 12
        for batch, offs in zip(got, plan, strict=True):
            want = np.stack([tokens[s : s + n] for s in offs.tolist()])
            np.testing.assert_array_equal(batch["x"], want[:, :-1], err_msg=spec)
            np.testing.assert_array_equal(batch["y"], want[:, 1:], err_msg=spec)
    assert tokens.size / kind.rows < n  # rows are shorter than a sample: samples span rows


def test_group_texts_serves_shuffled_blocks_of_the_concatenation(tmp_path: Path) -> None:
    kind = _kind(tmp_path)
    tokens = _tokens(kind)
    n = kind.context + 1
    blocks = tokens[: tokens.size // n * n].reshape(-1, n)
    steps = -(-len(blocks) // kind.host_batch) + 2  # past one epoch: a new order
    got = _batches(kind, "group-texts", steps)
    seen = []
    for batch in got:
        rows = np.concatenate([batch["x"], batch["y"][:, -1:]], axis=1)
        hit = (blocks[None, :, :] == rows[:, None, :]).all(axis=2)
        assert (hit.sum(axis=1) == 1).all()  # each sample is one whole block
        seen += np.argmax(hit, axis=1).tolist()
    epoch = seen[: len(blocks)]
    assert sorted(epoch) == list(range(len(blocks)))  # every block once an epoch
    assert epoch != sorted(epoch)  # shuffled
    # a seed makes another order
    other = _batches(kind, "group-texts?seed=5", 1)[0]["x"]
    assert not np.array_equal(other, got[0]["x"])


def test_a_planted_mismatch_is_caught(tmp_path: Path) -> None:
    kind = _kind(tmp_path)
    wl = kind.workload.replace(variants=("naive", "headrace-sync", "headrace-sync?seed=1"))
    summary, results = run_workload(make_kind(wl, str(tmp_path)), options=RunOptions(isolate=False))
    assert summary["mismatches"] == [["naive", "headrace-sync"], ["headrace-sync?seed=1"]]
    for r in results:
        assert r["rows"] == kind.rows and 0 < r["first_batch_s"] < r["stages"]["wall_s"] + 1


def _rows_in_file(kind: PackedKind) -> list[tuple[int, int, int]]:
    """Per row: file offset of its first value, its length, file offset of its list
    offset, from the buffers' addresses in a memory map of the file."""
    mm = pa.memory_map(kind.files()[0])
    base = mm.read_buffer(1).address
    mm.seek(0)
    rows = []
    for batch in pa.ipc.open_stream(mm):
        col = batch.column(COLUMN)
        offsets = np.frombuffer(col.buffers()[1], dtype=np.int32)
        vals = col.values.buffers()[1].address - base
        at = col.buffers()[1].address - base
        rows += [
            (vals + int(offsets[i]) * 4, int(offsets[i + 1] - offsets[i]), at + i * 4)
            for i in range(len(col))
        ]
    return rows


def _pages(start: int, nbytes: int) -> set[int]:
    return set(range(start // PAGE, (start + nbytes - 1) // PAGE + 1)) if nbytes else set()


def _pages_by_hand(kind: PackedKind, offs: np.ndarray) -> int:
    """Per sample, the pages of the values it slices and of its rows' list offsets."""
    rows = _rows_in_file(kind)
    starts = np.cumsum([0] + [r[1] for r in rows])
    total = 0
    for s in offs.tolist():
        pages: set[int] = set()
        r = int(np.searchsorted(starts, s, side="right")) - 1
        at, need = s - int(starts[r]), kind.context + 1
        while need:
            addr, length, off = rows[r]
            take = min(need, length - at)
            pages |= _pages(addr + at * 4, take * 4) | _pages(off, 8)
            need -= take
            r, at = r + 1, 0
        total += len(pages) * PAGE
    return total


def test_naive_bytes_read_are_the_pages_its_slices_touch(tmp_path: Path) -> None:
    # Rows of up to 4,000 ids in batches of 5: samples of 2,049 tokens cross pages,
    # rows and record batches.
    kind = _kind(tmp_path, rows=200, max_len=4000, batch_rows=5, context=2048)
    plan = list(kind.plan_chunks(kind.workload.train.seed, 5))
    stream = kind.open("naive", 5)
    read = []
    for _ in stream:
        read.append(stream.bytes_read())
    stream.close()
    want = np.cumsum([_pages_by_hand(kind, offs) for offs in plan]).tolist()
    assert read == want
    # group-texts reads the whole column: every value and offset page, once
    stream = kind.open("group-texts", 1)
    list(stream)
    every: set[int] = set()
    for addr, length, off in _rows_in_file(kind):
        every |= _pages(addr, length * 4) | _pages(off, 8)
    assert stream.bytes_read() == len(every) * PAGE
    stream.close()


def _write_shards(kind: PackedKind, shards: list[int], max_len: int = 60) -> None:
    """Replace the kind's table with shards of these many rows of 1 to ``max_len`` ids."""
    rng = np.random.default_rng(3)
    Path(kind.files()[0]).unlink()
    names = []
    for i, rows in enumerate(shards):
        lengths = rng.integers(1, max_len + 1, rows)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        values = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
        table = pa.table({COLUMN: pa.ListArray.from_arrays(offsets, values)})
        name = f"data-{i:05d}-of-{len(shards):05d}.arrow"
        with pa.OSFile(str(Path(kind.path, name)), "wb") as f:
            with pa.ipc.new_stream(f, table.schema) as w:
                w.write_table(table, max_chunksize=25)
        names.append({"filename": name})
    Path(kind.path, "state.json").write_text(json.dumps({"_data_files": names}))


def test_group_texts_refuses_a_column_shorter_than_a_block(tmp_path: Path) -> None:
    kind = _kind(tmp_path)
    _write_shards(kind, [2], max_len=10)  # <= 20 tokens; a block is L + 1 = 33
    stream = kind.open("group-texts", 1)
    with pytest.raises(DataError, match=r"column 'input_ids' holds \d+ tokens, not one block"):
        next(iter(stream))
    stream.close()


def test_two_shards_give_the_same_batches_both_ways(tmp_path: Path) -> None:
    # save_to_disk with num_shards=2: one stream over both for headrace (samples run
    # across the shards), and the naive baseline indexes the concatenation of both: the
    # same plan, the same tokens.
    from headrace.formats import table_token_files

    kind = _kind(tmp_path)
    _write_shards(kind, [170, 90])
    kind = make_kind(kind.workload, str(tmp_path))
    assert isinstance(kind, PackedKind)
    (stream,) = kind.streams()
    assert len(stream.members) == 2
    edge = table_token_files(stream.members[0])[0].num_tokens
    plan = np.concatenate(list(kind.plan_chunks(kind.workload.train.seed, 40)))
    assert ((plan < edge) & (plan + kind.context >= edge)).any()  # across the shards
    a, b = _batches(kind, "naive", 40), _batches(kind, "headrace-sync", 40)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x["x"], y["x"])
        np.testing.assert_array_equal(x["y"], y["y"])


def test_bad_sizes_are_named(tmp_path: Path) -> None:
    wl = builtin_workloads()["packed"]
    with pytest.raises(ConfigError, match=r"must be >= 1 \(got rows=0, max_len=1000"):
        make_kind(wl.replace(dataset={"rows": 0}), str(tmp_path))
    with pytest.raises(ConfigError, match=r"10 rows of 1-20 tokens .* too few for context 1024"):
        make_kind(wl.replace(dataset={"rows": 10, "max_len": 20}), str(tmp_path))
