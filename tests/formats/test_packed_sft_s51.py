"""An SFT dataset (``input_ids`` and ``labels``, -100 on prompt tokens) written by
``datasets.save_to_disk`` and packed as the docs say, against a NumPy packing of the same
rows built here: x, y, position_ids, cu_seqlens and max_seqlen of every batch of an
epoch, no token lost or read twice, resumed and over 2 hosts; and what packing does with
the ``labels`` column (it reads ``input_ids`` only, and says so)."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from headrace.formats import TokenSource, cu_seqlens, table_token_files
from headrace.pipeline import Loader

datasets = pytest.importorskip("datasets")

L = 16


def _sft(root: Path, seed: int = 0, n: int = 60) -> tuple[list[Any], list[Any]]:
    """Conversations of 0 to 3L tokens, the first p of each (the prompt) labelled -100."""
    rng = np.random.default_rng(seed)
    ids, labels = [], []
    for _ in range(n):
        k = int(rng.choice([0, 1, int(rng.integers(2, 3 * L + 1))]))
        p = int(rng.integers(0, k + 1))
        t = rng.integers(0, 32000, k).astype(np.int32)
        lab = t.copy()
        lab[:p] = -100
        ids.append(t)
        labels.append(lab)
    seq = datasets.Sequence(datasets.Value("int32"))
    feats = datasets.Features({"input_ids": seq, "labels": seq})
    ds = datasets.Dataset.from_dict(
        {"input_ids": [a.tolist() for a in ids], "labels": [a.tolist() for a in labels]},
        features=feats,
    )
    ds.save_to_disk(str(root), num_shards=3)
    return ids, labels


def _files(root: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the labels column, warned of below
        return table_token_files(root, "input_ids")


def _reference(ids: list[Any], offset: int) -> tuple[Any, Any, Any]:
    """x, y and position_ids of the sample at token ``offset`` of the rows' concatenation."""
    stream = np.concatenate(ids)
    firsts = np.cumsum([0] + [len(r) for r in ids])[:-1]
    x, y = stream[offset : offset + L], stream[offset + 1 : offset + L + 1]
    pos = [min(offset + j - int(firsts[firsts <= offset + j].max()), j) for j in range(L)]
    return x, y, np.array(pos)


def _cu(pos: Any) -> tuple[Any, int]:
    """Documents of the flattened batch, cut at every 0 (a loop, not np.flatnonzero)."""
    flat = pos.reshape(-1).tolist()
    cuts = [i for i, p in enumerate(flat) if p == 0] + [len(flat)]
    return np.array(cuts), max(b - a for a, b in itertools.pairwise(cuts))


def test_a_save_to_disk_sft_dataset_packs_as_numpy_does(tmp_path: Path) -> None:
    ids, _ = _sft(tmp_path / "ds")
    stream = np.concatenate(ids)
    batch, hosts = 4, 2

    def source() -> TokenSource:
        return TokenSource(
            _files(tmp_path / "ds"), context=L, positions="documents", window_bytes=4096
        )

    src = source()
    steps = src.samples_per_epoch // batch
    with Loader(src, batch_size=batch, seed=3, steps=steps) as ld:
        whole = list(ld)
    seen = np.zeros(stream.size, np.int64)
    for b in whole:
        pos = b["position_ids"]
        cu, longest = cu_seqlens(pos)
        want_cu, want_longest = _cu(pos)
        assert cu.dtype == np.int32 and longest == want_longest
        np.testing.assert_array_equal(cu, want_cu)
        for i in range(batch):
            # The sample's offset: where its x lies in the stream (ids are random: unique).
            hits = [
                o for o in range(stream.size - L) if np.array_equal(stream[o : o + L], b["x"][i])
            ]
            assert len(hits) == 1
            x, y, p = _reference(ids, hits[0])
            np.testing.assert_array_equal(b["x"][i], x)
            np.testing.assert_array_equal(b["y"][i], y)
            np.testing.assert_array_equal(pos[i], p)
            # y[i, j] is a document's first token (a target across documents) exactly
            # where position_ids[i, j + 1] is 0, but in the last column, which no
            # position of the row tells: the docs' mask, checked.
            firsts = set(np.cumsum([0] + [len(r) for r in ids]).tolist())
            cross = [j for j in range(L) if hits[0] + j + 1 in firsts]
            assert [j for j in cross if j < L - 1] == np.flatnonzero(pos[i, 1:] == 0).tolist()
            seen[hits[0] : hits[0] + L] += 1
    # An epoch reads every token once but for the stream's tail (fewer than L + 1 of them).
    assert (seen <= 1).all() and seen[: stream.size - L - 1].all()
    # Resumed mid-epoch on 2 hosts: the same batches, the hosts' halves in rank order.
    with Loader(source(), batch_size=batch, seed=3, steps=steps) as ld:
        it = iter(ld)
        for _ in range(3):
            next(it)
        state = ld.state_dict()
    parts = []
    for rank in range(hosts):
        ld = Loader(source(), batch_size=batch, seed=3, steps=steps, rank=rank, world_size=hosts)
        ld.load_state_dict(state)
        with ld:
            parts.append(list(ld))
    for t, halves in enumerate(zip(*parts, strict=True)):
        for key in ("x", "y", "position_ids"):
            got = np.concatenate([h[key] for h in halves])
            np.testing.assert_array_equal(got, whole[3 + t][key])


def test_a_labels_column_packing_leaves_unread_is_warned_of(tmp_path: Path) -> None:
    _sft(tmp_path / "ds", n=12)
    # y is the next id of input_ids everywhere: the labels' -100 on prompts is not applied.
    with pytest.warns(UserWarning, match=r"'labels'.*not read.*prompt.*TableSource") as got:
        table_token_files(tmp_path / "ds", "input_ids")
    assert "data-00000-of-00003.arrow" in str(got[0].message)
    # A table of token ids alone (pretraining) is not warned of; nor packing labels itself.
    path = tmp_path / "ids.arrow"
    table = pa.table({"input_ids": pa.array([[1, 2, 3], [4]], pa.list_(pa.int32()))})
    with pa.ipc.new_stream(str(path), table.schema) as w:
        w.write_table(table)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table_token_files(path, "input_ids")
        table_token_files(tmp_path / "ds", "labels")
