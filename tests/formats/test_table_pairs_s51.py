"""A contrastive table as an E5-style user writes it (s51): token ids that went into
the table as text (a CSV round trip, ``str(ids)``) instead of a ``list<int32>``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError
from headrace.formats import TableSource
from headrace.pipeline import Loader, Mixture


def test_ids_stored_as_text_say_they_are_read_as_bytes(tmp_path: Path) -> None:
    rng = np.random.default_rng(51)
    ids = [rng.integers(100, 30_000, int(n)).tolist() for n in rng.integers(3, 20, 40)]
    pq.write_table(
        pa.table(
            {
                "query_ids": pa.array([str(r) for r in ids]),  # "[4821, 977, ...]"
                "pos_ids": pa.array(ids, pa.list_(pa.int32())),
            }
        ),
        tmp_path / "pairs.parquet",
    )
    src = TableSource(tmp_path / "pairs.parquet", columns=["query_ids", "pos_ids"], width=32)
    # Until 2026-12-07 the message said only "pass truncate=True", which gives each
    # text's first 32 UTF-8 bytes as 32 "token ids".
    with pytest.raises(ConfigError) as err:
        src.read(0, np.arange(8))
    msg = str(err.value)
    assert "column 'query_ids'" in msg and "bytes of UTF-8 text" in msg
    assert "read as its UTF-8 bytes" in msg and "list<int32>" in msg
    assert "'[" in msg  # the text's start, as found


def test_left_padding_asked_for_rows_of_token_lists_says_what_to_do(tmp_path: Path) -> None:
    # A decoder embedder (last-token pooling) pads its queries on the left; its
    # negatives column of lists pads on the right only.
    negs = pa.array([[[5, 6], [7]], [[8]]], pa.list_(pa.list_(pa.int32())))
    q = pa.array([[1, 2], [3]], pa.list_(pa.int32()))
    pq.write_table(pa.table({"query_ids": q, "neg_ids": negs}), tmp_path / "t.parquet")
    with pytest.raises(ConfigError) as err:
        TableSource(
            tmp_path / "t.parquet",
            columns=["query_ids", "neg_ids"],
            shapes={"neg_ids": (None, None)},
            widths={"query_ids": 4, "neg_ids": (2, 4)},
            pad_side="left",
        )
    msg = str(err.value)
    assert "column 'neg_ids' holds rows of lists, padded on the right only" in msg
    assert "pad_side='right'" in msg and "mask.sum(-1) - 1" in msg


def test_a_mixture_of_pair_tables_checked_against_the_vocabulary(tmp_path: Path) -> None:
    # A Mixture reads each source once with no samples, for its layout: with vocab_size
    # that read failed, "cannot reshape array of size 0 into shape (0,newaxis)", so no
    # mixture of tables with vocab_size= ran a step (until 2026-12-07).
    rng = np.random.default_rng(7)
    sources = {}
    for name, n in (("msmarco", 50), ("nq", 30)):
        q = [rng.integers(1, 1000, int(k)).tolist() for k in rng.integers(1, 9, n)]
        negs = [[rng.integers(1, 1000, 4).tolist()] * int(k) for k in rng.integers(0, 4, n)]
        cols = {
            "query_ids": pa.array(q, pa.list_(pa.int32())),
            "neg_ids": pa.array(negs, pa.list_(pa.list_(pa.int32()))),
            "n": pa.array(range(n), pa.int64()),
        }
        pq.write_table(pa.table(cols), tmp_path / f"{name}.parquet", row_group_size=16)
        sources[name] = TableSource(
            tmp_path / f"{name}.parquet",
            columns=["query_ids", "neg_ids", "n"],
            shapes={"neg_ids": (None, None)},
            widths={"query_ids": 8, "neg_ids": (3, 4)},
            vocab_size={"query_ids": 1000, "neg_ids": 1000, "n": 50},
        )
        assert all(v.shape[0] == 0 for v in sources[name].read(0, np.arange(0)).values())
    mix = Mixture(sources, [0.6, 0.4], batch_size=10)
    with Loader(mix, batch_size=10, seed=0, steps=8) as ld:
        batches = list(ld)
    src = np.concatenate([b["source"] for b in batches])
    assert (src == 0).sum() == 48 and batches[0]["neg_ids"].shape == (10, 3, 4)
