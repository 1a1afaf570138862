"""MDSSource edge cases (bug hunt s47): compressed shards and their hashes, on shards
written as Streaming's MDSWriter writes them (tests/_mds_files.py)."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _mds_files import write_mds
from headrace.errors import FormatError
from headrace.formats import MDSSource


def _rewrite(root: Path, change: Any) -> None:
    index = json.loads((root / "index.json").read_text())
    for entry in index["shards"]:
        change(entry)
    (root / "index.json").write_text(json.dumps(index))


def _write(root: Path, compression: str, **kw: Any) -> list[Path]:
    samples = [{"id": k, "text": "word " * (k % 9)} for k in range(20)]
    return write_mds(
        root, {"id": "int", "text": "str"}, samples, per_shard=8, compression=compression, **kw
    )


def _read_first(root: Path) -> None:
    with MDSSource(root, shuffle=False) as src:
        src.read(0, np.arange(3))


def test_a_snappy_stream_of_far_more_than_raw_data_bytes_is_refused_without_making_it(
    tmp_path: Path,
) -> None:
    # 3 MiB of snappy that decompress to 64 MiB where the index says a shard's size: its
    # header states 64 MiB, and the whole 64 MiB was made before it was refused (the
    # other codecs stop past raw_data.bytes).
    import snappy

    path = _write(tmp_path, "snappy")[0]
    path.write_bytes(snappy.compress(bytes(64 << 20)))
    _rewrite(tmp_path, lambda e: e["zip_data"] and e["zip_data"].update(bytes=None, hashes={}))
    tracemalloc.start()
    try:
        with pytest.raises(
            FormatError,
            match=r"shard.00000.mds.snappy: cannot be decompressed as snappy \(ValueError: its "
            r"header states 67108864 bytes\)",
        ):
            _read_first(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak:,} bytes made to refuse a shard"


def test_a_cut_snappy_stream_says_why(tmp_path: Path) -> None:
    # python-snappy's UncompressError carries no message (its cause does): the refusal
    # said "(UncompressError: )".
    path = _write(tmp_path, "snappy")[0]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    _rewrite(tmp_path, lambda e: e["zip_data"] and e["zip_data"].update(bytes=None))
    with pytest.raises(
        FormatError, match=r"shard.00000.mds.snappy: cannot be decompressed as snappy \(\w+: \w"
    ):
        _read_first(tmp_path)


@pytest.mark.parametrize("algo", ["new", "algorithms_available", "file_digest", "xxh64_hexdigest"])
def test_a_hash_named_by_no_algorithm_is_skipped_as_unknown(tmp_path: Path, algo: str) -> None:
    # hashlib's (and xxhash's) other attributes were taken for hash functions: a
    # TypeError or AttributeError from inside the decompression, naming nothing.
    _write(tmp_path, "gz", hashes=["sha1"])
    _rewrite(tmp_path, lambda e: e["zip_data"]["hashes"].update({algo: "00"}))
    _read_first(tmp_path)


@pytest.mark.timeout(60)
def test_shards_listed_twice_in_a_large_index_are_refused_at_once() -> None:
    # An index merged twice from the same parts (Streaming's merge_index) lists each of
    # its shards twice: each name was counted in a list of all of them, so 30,000 shards
    # took minutes to refuse (quadratic); 8,000 took 18 s.
    from headrace.formats._mds_index import MDSIndex, MDSShard
    from headrace.formats._mds_open import _refuse_repeats

    shards = tuple(MDSShard(f"part/shard.{k:05d}.mds", 1, 10) for k in range(30_000))
    with pytest.raises(
        FormatError,
        match=r"index.json: shard file\(s\) listed twice: \['part/shard.00000.mds', "
        r"'part/shard.00001.mds', 'part/shard.00002.mds'\]",
    ):
        _refuse_repeats(MDSIndex((), shards * 2), "index.json")


@pytest.mark.parametrize(
    ("compression", "key", "value", "said"),
    [
        (None, "samples", 2**63, r"samples is 9223372036854775808; a shard counts its samples"),
        (None, "samples", 2**32, r"samples is 4294967296; a shard counts its samples in 32 bits"),
        (
            "zstd",
            "raw_data",
            2**63,
            r"raw_data.bytes is 9223372036854775808; a shard's offsets are 32-bit",
        ),
    ],
)
def test_counts_past_what_a_shard_can_hold_are_refused_by_name(
    tmp_path: Path, compression: str | None, key: str, value: int, said: str
) -> None:
    # A shard counts its samples, and places them, in uint32s: an index saying more
    # is damaged. 2**63 and more failed at open with NumPy's OverflowError ("Python int
    # too large to convert to C long"), naming nothing.
    write_mds(
        tmp_path, {"a": "int"}, [{"a": k} for k in range(4)], per_shard=2, compression=compression
    )

    def change(entry: dict[str, Any]) -> None:
        if entry["raw_data"]["basename"] == "shard.00000.mds":
            if key == "samples":
                entry["samples"] = value
            else:
                entry["raw_data"]["bytes"] = value

    _rewrite(tmp_path, change)
    with pytest.raises(FormatError, match=rf"index.json: shard 0 \(shard.00000.mds\): {said}"):
        MDSSource(tmp_path)


@pytest.mark.parametrize("size", [8, 0, -4])
def test_a_fixed_size_given_to_a_column_left_out_is_refused_not_read_past(
    tmp_path: Path, size: int
) -> None:
    # column_sizes was checked against the encoding only for the columns headrace reads:
    # a pkl column (always variable) said to be fixed moved every column after it, and
    # columns=["b"] read other bytes as b's values, silently.
    write_mds(
        tmp_path,
        {"a": "pkl", "b": "int", "c": "str"},
        [{"a": [k] * 3, "b": 100 + k, "c": "x"} for k in range(4)],
        per_shard=4,
    )
    _rewrite(tmp_path, lambda e: e.update(column_sizes=[size, 8, None]))
    with pytest.raises(
        FormatError,
        match=rf"column 'a' \(pkl\): column_sizes says {size} bytes, the encoding variable",
    ):
        MDSSource(tmp_path, columns=["b"])
