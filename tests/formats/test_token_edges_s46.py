"""Edges of token files found by comparing TokenSource with a plain NumPy reading.

``format="nanogpt"`` fixes the dtype at uint16, so a ``dtype=`` or a sidecar saying
otherwise is a contradiction to refuse, not an argument to drop; and a token id outside
the vocabulary in a packed Arrow column names the row of the shard it is in.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from headrace.errors import ConfigError, FormatError
from headrace.formats import TokenSource, table_token_files


def wide_ids(path: Path) -> np.ndarray:
    """uint32 ids of a 200,019-id tokenizer (o200k): high halves up to 3, past the
    0-or-1 the nanoGPT head check looks for."""
    tokens = np.random.default_rng(0).integers(131_072, 200_019, 4_096).astype(np.uint32)
    tokens.tofile(path)
    return tokens


@pytest.mark.parametrize("dtype", ["uint32", "int32"])
def test_nanogpt_format_refuses_another_dtype_given(tmp_path: Path, dtype: str) -> None:
    wide_ids(tmp_path / "train.bin")
    # Taken as uint16 whatever dtype said: each id read as two, with no error.
    with pytest.raises(ConfigError) as info:
        TokenSource(tmp_path / "train.bin", context=8, format="nanogpt", dtype=dtype)
    msg = str(info.value)
    assert "train.bin" in msg and f"dtype={dtype} given" in msg
    assert "format='nanogpt'" in msg and "uint16" in msg and "format='raw'" in msg


def test_nanogpt_format_refuses_a_sidecar_of_another_dtype(tmp_path: Path) -> None:
    wide_ids(tmp_path / "val.bin")
    (tmp_path / "val.bin.json").write_text(json.dumps({"dtype": "uint32"}))
    with pytest.raises(ConfigError) as info:
        TokenSource(tmp_path / "val.bin", context=8, format="nanogpt")
    msg = str(info.value)
    assert "val.bin.json says uint32" in msg and "format='raw'" in msg


def test_nanogpt_format_takes_uint16_said_twice(tmp_path: Path) -> None:
    tokens = np.arange(1_000, 1_100, dtype=np.uint16)
    tokens.tofile(tmp_path / "val.bin")
    (tmp_path / "val.bin.json").write_text(json.dumps({"dtype": "uint16"}))
    src = TokenSource(
        tmp_path / "val.bin", context=9, format="nanogpt", dtype="uint16", shuffle=False
    )
    assert src.dtype == np.uint16
    assert np.array_equal(src.read(0, np.arange(11))["x"].ravel(), tokens[:99])
    src.close()


def _shards(root: Path, rows: list[list[np.ndarray]]) -> None:
    root.mkdir()
    names = []
    for i, shard in enumerate(rows):
        table = pa.table({"input_ids": pa.array(shard, type=pa.list_(pa.int32()))})
        name = f"data-{i:05d}-of-{len(rows):05d}.arrow"
        with pa.ipc.new_stream(str(root / name), table.schema) as w:
            for batch in table.to_batches(max_chunksize=4):
                w.write_batch(batch)
        names.append({"filename": name})
    (root / "state.json").write_text(json.dumps({"_data_files": names}))


@pytest.mark.parametrize("where", ["local", "file://"])
def test_a_packed_id_outside_the_vocabulary_names_its_shards_row(
    tmp_path: Path, where: str
) -> None:
    # file:// takes the object-store path: row offsets fetched, as from S3.
    ones = np.ones(5, dtype=np.int32)
    # Shard 0: 10 rows, one empty; an empty shard; shard 2: the bad id in its row 3.
    first = [ones.copy() for _ in range(10)]
    first[6] = first[6][:0]
    second = [ones.copy() for _ in range(6)]
    second[3][2] = 999
    _shards(tmp_path / "ds", [first, [ones[:0]] * 2, second])
    root = str(tmp_path / "ds") if where == "local" else f"file://{tmp_path / 'ds'}"
    src = TokenSource(table_token_files(root), context=8, shuffle=False, vocab_size=100)
    with pytest.raises(FormatError) as info:
        src.read(0, np.arange(src.samples_per_epoch))
    msg = str(info.value)
    # Row 15 of the dataset (10 + 2 + 3), row 3 of its shard.
    assert "data-00002-of-00003.arrow: column 'input_ids', row 3, position 2 " in msg
    assert "(row 15 of the dataset, token offset 62 of the packed stream)" in msg
    src.close()


@pytest.mark.filterwarnings("ignore:.*column 'labels' is not read")  # token ids here
def test_a_packed_dataset_listed_twice_is_refused_another_column_is_not(
    tmp_path: Path,
) -> None:
    rows = [np.arange(50, dtype=np.int32) + i for i in range(10)]
    table = pa.table({"input_ids": pa.array(rows), "labels": pa.array(rows)})
    with pa.ipc.new_stream(str(tmp_path / "a.arrow"), table.schema) as w:
        w.write_table(table)
    (tmp_path / "b.arrow").symlink_to(tmp_path / "a.arrow")
    once = table_token_files(tmp_path / "a.arrow")
    # Read twice an epoch, without a word, by its path or a link to it.
    for again in (tmp_path / "a.arrow", tmp_path / "b.arrow"):
        with pytest.raises(ConfigError) as info:
            TokenSource([*once, *table_token_files(again)], context=8)
        msg = str(info.value)
        assert "column 'input_ids' is in two of the token streams listed" in msg
        assert "List each dataset once" in msg and "Mixture" in msg
    both = TokenSource([*once, *table_token_files(tmp_path / "a.arrow", "labels")], context=8)
    assert both.samples_per_epoch == 2 * TokenSource(once, context=8).samples_per_epoch
    both.close()
