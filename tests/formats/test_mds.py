"""MDSSource on local MDS datasets written as Streaming writes them (tests/_mds_files.py):
values of every encoding read, order and resume as the other sources, narrow column
reads, and every refusal naming the file and what is wrong."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _mds_files import write_mds, write_two_bad_dtypes
from _row_files import odirect_works
from headrace.errors import ConfigError, FormatError, ObjectNotFoundError, ReadEOFError
from headrace.formats import MDSSource, encode_jpeg, encode_png
from headrace.pipeline import Loader, Mixture, check
from headrace.testing import assert_resume_exact, batch_digest

COLUMNS = {
    "label": "int",
    "u16": "uint16",
    "score": "float32",
    "half": "float16",
    "raw": "bytes",
    "text": "str",
    "meta": "json",
    "vec": "ndarray:float32:2,3",
    "ids": "ndarray:int32",
    "any": "ndarray",
}


def _samples(n: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(1)
    return [
        {
            "label": -3 * k,
            "u16": 60_000 + k,
            "score": k / 4,
            "half": k / 8,
            "raw": bytes(rng.integers(0, 256, k % 5 + 1, dtype=np.uint8)),
            "text": "naïve " * (k % 3),
            "meta": {"k": k},
            "vec": np.arange(6, dtype=np.float32).reshape(2, 3) + k,
            "ids": np.arange(k % 4 + 1, dtype=np.int32),
            "any": rng.standard_normal((k % 2 + 1, 3)).astype(np.float64 if k % 2 else np.uint16),
        }
        for k in range(n)
    ]


@pytest.fixture
def mds(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    samples = _samples(37)
    write_mds(tmp_path / "ds", COLUMNS, samples, per_shard=10)  # shards of 10, 10, 10, 7
    return tmp_path / "ds", samples


def _digest(src: MDSSource, steps: int = 6, batch: int = 5, seed: int = 3) -> str:
    with Loader(src, batch_size=batch, seed=seed, steps=steps) as loader:
        return batch_digest(loader)


def test_every_encoding_reads_its_values(mds: tuple[Path, list[dict[str, Any]]]) -> None:
    root, samples = mds
    with MDSSource(root, shuffle=False) as src:
        assert len(src) == 37 and len(src.index.shards) == 4
        b = src.read(0, np.arange(37))
    assert b["index"].tolist() == list(range(37))
    assert b["label"].dtype == np.int64 and b["label"].tolist() == [s["label"] for s in samples]
    assert b["u16"].dtype == np.uint16 and b["u16"].tolist() == [s["u16"] for s in samples]
    assert b["score"].dtype == np.float32 and b["half"].dtype == np.float16
    assert b["half"].tolist() == [np.float16(s["half"]) for s in samples]
    assert b["vec"].shape == (37, 2, 3) and b["vec"].dtype == np.float32
    for k, s in enumerate(samples):
        assert bytes(b["raw"][k]) == s["raw"]
        assert bytes(b["text"][k]).decode() == s["text"]
        assert json.loads(bytes(b["meta"][k])) == s["meta"]
        assert np.array_equal(b["ids"][k], s["ids"]) and b["ids"][k].dtype == np.int32
        assert np.array_equal(b["any"][k], s["any"]) and b["any"][k].dtype == s["any"].dtype
    assert b["ids_shape"][:, 0].tolist() == [k % 4 + 1 for k in range(37)]


def test_images_decode_as_file_sources_do(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    pix = [rng.integers(0, 256, (6 + k % 2, 4, 3), dtype=np.uint8) for k in range(6)]
    samples = [{"jpg": encode_jpeg(p), "png": encode_png(p), "y": k} for k, p in enumerate(pix)]
    write_mds(tmp_path, {"jpg": "jpeg:90", "png": "png", "y": "int"}, samples, per_shard=4)
    with MDSSource(tmp_path, shuffle=False) as src:
        b = src.read(0, np.arange(6))
    for k, p in enumerate(pix):
        assert np.array_equal(b["png"][k], p)
        assert b["jpg"][k].shape == p.shape
    assert b["png_shape"].tolist() == [list(p.shape) for p in pix]


def test_only_the_columns_bytes_are_read_where_sizes_allow(tmp_path: Path) -> None:
    samples = [{"a": k, "b": np.full(4, k, np.uint8), "t": "x" * 500} for k in range(40)]
    write_mds(tmp_path, {"a": "int", "b": "ndarray:uint8:4", "t": "str"}, samples, per_shard=20)
    with MDSSource(tmp_path, columns=["b", "a"], shuffle=False) as narrow:
        b = narrow.read(0, np.arange(40))
        # The size of "t" first (4 bytes), then a (8) and b (4): 12 bytes a sample.
        assert narrow.stats.bytes == 40 * 12 and narrow.stats.headers == 2
    assert b["a"].tolist() == list(range(40)) and b["b"][:, 0].tolist() == list(range(40))
    with (
        MDSSource(tmp_path, columns=["b", "a"]) as vector,
        MDSSource(tmp_path, columns=["b", "a"]) as each,
    ):
        assert vector._vector  # numbers and fixed arrays read narrow: a batch at once
        each._vector = False  # the decode a sample, as for every other column
        assert _digest(vector) == _digest(each)
    with MDSSource(tmp_path, columns=["a"], shuffle=False) as one:
        one.read(0, np.arange(40))
        assert one.stats.bytes == 40 * 8
    with MDSSource(tmp_path, columns=["t", "a"], shuffle=False) as whole:  # t's size varies
        got = whole.read(0, np.arange(40))
        assert whole.stats.bytes == 40 * (4 + 8 + 4 + 500)
    assert [bytes(x) for x in got["t"]] == [b"x" * 500] * 40 and got["a"].tolist() == b[
        "a"
    ].tolist()


def test_offsets_are_read_once_a_shard_lazily(mds: tuple[Path, list[dict[str, Any]]]) -> None:
    root, _ = mds
    with MDSSource(root, shuffle=False) as src:
        assert src.stats.headers == 0  # opening reads index.json only
        src.read(0, np.arange(3))
        assert src.stats.headers == 1
        src.read(0, np.arange(3, 25))
        assert src.stats.headers == 3
        src.read(0, np.arange(37))
        assert src.stats.headers == 4


def test_order_reshuffles_per_epoch_and_resumes(mds: tuple[Path, list[dict[str, Any]]]) -> None:
    root, _ = mds
    src = MDSSource(root)
    e0 = src.read(7, np.arange(37))["index"]
    e1 = src.read(7, np.arange(37, 74))["index"]
    assert sorted(e0.tolist()) == sorted(e1.tolist()) == list(range(37))
    assert e0.tolist() != e1.tolist()
    assert _digest(src) == _digest(MDSSource(root)) != _digest(MDSSource(root), seed=4)
    # 12 steps of 4 cross the epoch at sample 37; resumed mid-epoch and in the second.
    assert_resume_exact(
        lambda: Loader(MDSSource(root), batch_size=4, seed=3), steps=12, resume_at=[3, 10]
    )
    src.close()


def test_columns_refused_by_name(tmp_path: Path) -> None:
    write_mds(
        tmp_path, {"a": "int", "obj": "pkl", "p": "str_int"}, [{"a": 1, "obj": [1], "p": "2"}]
    )
    with pytest.raises(FormatError, match=r"'obj' has encoding 'pkl': unpickling runs"):
        MDSSource(tmp_path)
    with pytest.raises(FormatError, match=r"'p' has encoding 'str_int'"):
        MDSSource(tmp_path, columns=["a", "p"])
    with MDSSource(tmp_path, columns=["a"]) as src:  # left out, the rest reads
        assert src.read(0, np.arange(1))["a"].tolist() == [1]
    with pytest.raises(ConfigError, match=r"unknown column\(s\) \['b'\]"):
        MDSSource(tmp_path, columns=["b"])
    with pytest.raises(ConfigError, match="a set's order"):
        MDSSource(tmp_path, columns={"a"})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="reader must be one of adaptive, mmap"):
        MDSSource(tmp_path, columns=["a"], reader="fast")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="image_mode"):
        MDSSource(tmp_path, columns=["a"], image_mode="CMYK")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"window_rows must be an integer >= 1 \(got 0\)"):
        MDSSource(tmp_path, columns=["a"], shuffle="window", window_rows=0)
    with pytest.raises(ConfigError, match=r"shard_cache_bytes must be an integer >= 1"):
        MDSSource(tmp_path, columns=["a"], shard_cache_bytes=0)


def _index(root: Path) -> dict[str, Any]:
    return json.loads((root / "index.json").read_text())  # type: ignore[no-any-return]


def _rewrite(root: Path, change: Any) -> None:
    index = _index(root)
    change(index)
    (root / "index.json").write_text(json.dumps(index))


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda i: i.update(version=1), "index version 1; headrace reads Streaming's version 2"),
        (
            lambda i: i["shards"][1].update(format="json"),
            r"shard 1 \(shard.00001.mds\): format 'json'",
        ),
        (
            lambda i: i["shards"][0].update(
                compression="lz4", zip_data={"basename": "shard.00000.mds.lz4"}
            ),
            r"shard 0 \(shard.00000.mds\): compression 'lz4' is no codec Streaming writes",
        ),
        (
            lambda i: i["shards"][0].update(compression="zstd:x"),
            r"compression 'zstd:x' is no codec",
        ),
        (
            lambda i: i["shards"][0].update(compression="gz", zip_data=None),
            r"compressed \('gz'\) but zip_data.basename does not name a file",
        ),
        (
            lambda i: (
                i["shards"][0].update(
                    compression="gz", zip_data={"basename": "shard.00000.mds.gz", "bytes": 9}
                )
                or i["shards"][0]["raw_data"].pop("bytes")
            ),
            r"compressed \('gz'\) but raw_data.bytes is missing",
        ),
        (
            lambda i: i["shards"][0].update(
                compression="gz",
                zip_data={"basename": "shard.00000.mds.gz", "bytes": 9, "hashes": ["sha1"]},
            ),
            r"zip_data.hashes is \['sha1'\], not",
        ),
        (lambda i: i["shards"][0].update(column_encodings=["int", "float128"]), "'float128'"),
        (
            lambda i: i["shards"][0].update(column_sizes=[8, 4]),
            r"column_sizes says 4 bytes, the encoding variable",
        ),
        # A fixed shape whose product wraps past 2**64 to 4 bytes was taken for 4 bytes
        # (then a NumPy ValueError at the reshape).
        (
            lambda i: i["shards"][0].update(
                column_encodings=["int", f"ndarray:uint8:{2**62 + 1},4"], column_sizes=[8, 4]
            ),
            r"column 'b' \(ndarray:uint8:4611686018427387905,4\): column_sizes says 4 bytes, "
            r"the encoding 18446744073709551620 bytes",
        ),
        (lambda i: i["shards"][1].update(column_names=["a", "c"]), "differ from those of"),
        (
            lambda i: i["shards"][1]["raw_data"].update(basename="shard.00000.mds"),
            r"shard file\(s\) listed twice: \['shard.00000.mds'\]",
        ),
        (lambda i: i["shards"][1]["raw_data"].update(basename="../x.mds"), "must name a file"),
        (lambda i: i.update(shards=[]), "lists no shards"),
        (lambda i: i.pop("shards"), r"not a Streaming index \(no 'shards' list\)"),
        (lambda i: i["shards"].append(7), r"shard 2 is int, not an object"),
        (
            lambda i: i["shards"][0].update(version=3),
            r"shard 0 .*: shard version 3; headrace reads 2",
        ),
        (lambda i: i["shards"][0].pop("samples"), r"no 'samples' in the shard's entry"),
        (lambda i: i["shards"][0].update(samples=-1), r"samples is -1, not a count"),
        (lambda i: i["shards"][0].update(samples=True), r"samples is True, not a count"),
        (
            lambda i: i["shards"][0]["raw_data"].update(bytes="9"),
            r"raw_data.bytes is '9', not a count",
        ),
        (lambda i: i["shards"][0].update(column_sizes=[8]), r"must be lists of one entry a column"),
        (
            lambda i: i["shards"][0].update(column_names=["a", 2]),
            r"must be lists of one entry a column",
        ),
        (
            lambda i: i["shards"][0].update(column_sizes=[8.0, None]),
            r"column 'a': column_sizes holds 8.0, not a count",
        ),
        (
            lambda i: [s.update(column_names=["a", "a"]) for s in i["shards"]],
            r"shard 0 .*: a column is named twice in \['a', 'a'\]",
        ),
        (
            lambda i: i["shards"][0].update(column_encodings=["int", "ndarray:complex64"]),
            r"column 'b': encoding 'ndarray:complex64' is not ndarray, ndarray:DTYPE or",
        ),
        (
            lambda i: i["shards"][0].update(column_encodings=["int", "ndarray:uint8:4,x"]),
            r"encoding 'ndarray:uint8:4,x': the shape must be dimensions >= 1",
        ),
        (
            lambda i: i["shards"][0].update(column_encodings=["int", "ndarray:uint8:0"]),
            r"encoding 'ndarray:uint8:0': the shape must be dimensions >= 1",
        ),
    ],
)
def test_index_refusals(tmp_path: Path, change: Any, said: str) -> None:
    write_mds(
        tmp_path, {"a": "int", "b": "str"}, [{"a": k, "b": "x"} for k in range(4)], per_shard=2
    )
    _rewrite(tmp_path, change)
    with pytest.raises(FormatError, match=said):
        MDSSource(tmp_path)


def test_an_index_that_is_not_json_is_named(tmp_path: Path) -> None:
    write_mds(tmp_path, {"a": "int"}, [{"a": 1}])
    (tmp_path / "index.json").write_bytes(b'{"shards": [')
    with pytest.raises(FormatError, match=r"index.json: not JSON \(Expecting value"):
        MDSSource(tmp_path)


@pytest.mark.parametrize(
    ("columns", "said"),
    [
        (["a", "a"], r"a column is named twice in columns=\['a', 'a'\]"),
        ([], r"columns=\[\] reads nothing; name at least one column"),
    ],
)
def test_columns_named_twice_or_none_are_refused(
    tmp_path: Path, columns: list[str], said: str
) -> None:
    write_mds(tmp_path, {"a": "int"}, [{"a": 1}])
    with pytest.raises(ConfigError, match=said):
        MDSSource(tmp_path, columns=columns)


def test_a_column_named_index_is_left_out_or_refused(tmp_path: Path) -> None:
    write_mds(tmp_path, {"a": "int", "index": "int"}, [{"a": 1, "index": 5}])
    with pytest.raises(ConfigError, match=r"column 'index' would hide the batch's 'index'"):
        MDSSource(tmp_path)
    with MDSSource(tmp_path, columns=["a"]) as src:
        assert src.read(0, np.arange(1))["index"].tolist() == [0]


def test_a_missing_index_or_shard_is_named(tmp_path: Path) -> None:
    with pytest.raises(ObjectNotFoundError, match=r"index.json: no such file"):
        MDSSource(tmp_path)
    paths = write_mds(tmp_path, {"a": "int"}, [{"a": k} for k in range(4)], per_shard=2)
    paths[1].unlink()
    with pytest.raises(
        ObjectNotFoundError, match=r"lists 1 shard\(s\) not stored there: shard.00001.mds \("
    ):
        MDSSource(tmp_path)
    (tmp_path / "index.json").write_text("{not json")
    with pytest.raises(FormatError, match=r"index\.json: not JSON"):
        MDSSource(tmp_path)


def _shard(tmp_path: Path, **kw: Any) -> tuple[Path, bytearray]:
    cols = kw.pop("columns", {"a": "int", "b": "str"})
    samples = kw.pop("samples", [{"a": k, "b": "y" * k} for k in range(6)])
    (path,) = write_mds(tmp_path, cols, samples, per_shard=len(samples))
    return path, bytearray(path.read_bytes())


def _save(tmp_path: Path, path: Path, data: bytearray) -> None:
    """The shard's new bytes, with the index's size set to them (so only the shard's own
    offsets can tell)."""
    path.write_bytes(bytes(data))
    _rewrite(tmp_path, lambda i: i["shards"][0]["raw_data"].update(bytes=len(data)))


def test_a_truncated_shard_is_refused(tmp_path: Path) -> None:
    path, data = _shard(tmp_path)
    path.write_bytes(bytes(data[:-3]))  # the index's size still the old one: found at open
    with pytest.raises(
        FormatError, match=r"shard.00000.mds: \d+ bytes, index.json says \d+ \(truncated"
    ):
        MDSSource(tmp_path)
    _save(tmp_path, path, data[:-3])  # the index agrees: the offsets say so when read
    with (
        MDSSource(tmp_path) as src,
        pytest.raises(FormatError, match=r"offsets say its samples end at byte .*truncated"),
    ):
        src.read(0, np.arange(1))
    _save(tmp_path, path, data[:10])  # shorter than the offsets table itself
    with (
        MDSSource(tmp_path) as src,
        pytest.raises(FormatError, match=r"shorter than the sample count and offsets"),
    ):
        src.read(0, np.arange(1))


def test_a_shard_with_bytes_after_its_samples_is_refused(tmp_path: Path) -> None:
    # The index agreeing with the file's size, its offsets end before it: not read as the
    # samples with something after them (a shard appended to, or another's bytes).
    path, data = _shard(tmp_path)
    _save(tmp_path, path, data + b"tail")
    with (
        MDSSource(tmp_path) as src,
        pytest.raises(FormatError, match=r"shard.00000.mds: \d+ bytes, .* 4 bytes after them"),
    ):
        src.read(0, np.arange(1))


def test_shards_that_hold_no_samples_are_refused(tmp_path: Path) -> None:
    write_mds(tmp_path, {"a": "int"}, [{"a": 1}], per_shard=1)
    _rewrite(tmp_path, lambda i: i["shards"][0].update(samples=0))
    with pytest.raises(FormatError, match=r"its shards hold no samples"):
        MDSSource(tmp_path)


def _u32(data: bytearray, word: int, value: int) -> None:
    data[4 * word : 4 * word + 4] = np.uint32(value).tobytes()


@pytest.mark.parametrize(
    ("words", "said"),
    [
        # Samples 1 and 2 start where sample 0 does (None: the first sample's offset).
        ({3: None, 4: None}, r"offsets not increasing: sample 1"),
        ({0: 5}, r"holds 5 samples by its header, index\.json says 6"),
        ({1: 8}, r"inside the offsets table"),
    ],
)
def test_damaged_offsets_are_refused(
    tmp_path: Path, words: dict[int, int | None], said: str
) -> None:
    path, data = _shard(tmp_path)
    first = int(np.frombuffer(bytes(data[4:8]), "<u4")[0])
    for word, value in words.items():
        _u32(data, word, first if value is None else value)
    _save(tmp_path, path, data)
    with MDSSource(tmp_path) as src, pytest.raises(FormatError, match=said):
        src.read(0, np.arange(1))


def test_sizes_disagreeing_with_columns_are_refused(tmp_path: Path) -> None:
    # Fixed columns only: every sample must be their 12 bytes.
    path, data = _shard(
        tmp_path, columns={"a": "int", "f": "float32"}, samples=[{"a": k, "f": k} for k in range(4)]
    )
    bad = data + b"\0\0"
    words = np.frombuffer(bytes(bad[: 4 * 6]), "<u4").copy()
    words[-1] += 2  # the last sample 14 bytes
    bad[: 4 * 6] = words.tobytes()
    _save(tmp_path, path, bad)
    with (
        MDSSource(tmp_path) as src,
        pytest.raises(
            FormatError,
            match=r"sample 3 is 14 bytes by its offsets; its columns' fixed sizes are 12",
        ),
    ):
        src.read(0, np.arange(4))
    # A variable column whose stated size disagrees with the sample's offsets.
    path, data = _shard(tmp_path / "v")
    first = int(np.frombuffer(bytes(data[4:8]), "<u4")[0])
    data[first : first + 4] = np.uint32(3).tobytes()  # sample 0's "b" said 3 bytes, it has 0
    _save(tmp_path / "v", path, data)
    with (
        MDSSource(tmp_path / "v", shuffle=False) as src,
        pytest.raises(
            FormatError,
            match=r"sample 0: its column sizes add up to 15 bytes, its offsets give it 12",
        ),
    ):
        src.read(0, np.arange(2))


def test_a_bad_ndarray_is_named(tmp_path: Path) -> None:
    write_mds(tmp_path, {"x": "ndarray"}, [{"x": np.arange(3, dtype=np.int8)}])
    (path,) = sorted(tmp_path.glob("*.mds"))
    data = bytearray(path.read_bytes())
    data[-6] = 200  # the dtype byte (then the shape byte and 1 dimension, then 3 values)
    path.write_bytes(bytes(data))
    with (
        MDSSource(tmp_path) as src,
        pytest.raises(FormatError, match=r"sample 0: column 'x': dtype byte 200"),
    ):
        src.read(0, np.arange(1))


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ([9], r"1 bytes end before the array's shape"),
        ([9, 2 << 2 | 1, 3, 0], r"4 bytes end inside the array's shape"),  # 2 dims of 2 bytes
    ],
)
def test_an_ndarray_value_cut_inside_its_header_is_named(value: list[int], said: str) -> None:
    # A value of "ndarray" (no dtype or shape in the encoding) states both first: a
    # dtype byte (9: int8), then ndim << 2 | the shape's width, then the shape.
    from headrace.formats._mds_index import Column, decode_ndarray

    column = Column("x", "ndarray", None, "ndarray", None, None)
    with pytest.raises(FormatError, match=rf"sample 3: {said}"):
        decode_ndarray(column, np.array(value, np.uint8), "sample 3")


@pytest.mark.parametrize(
    ("dims", "said"),
    [
        # Product 2**64 + 100: it wrapped to the 100 bytes there (a NumPy ValueError at the
        # reshape), and a dimension past 2**63 warned of an overflow.
        ((2**62 + 25, 4), r"100 bytes of values, an array int8 \(4611686018427387929, 4\) is 184"),
        ((2**64 - 1, 4), r"100 bytes of values, an array int8 \(18446744073709551615, 4\) is 737"),
    ],
)
def test_an_ndarray_shape_past_2_64_is_named(
    tmp_path: Path, dims: tuple[int, int], said: str
) -> None:
    write_mds(tmp_path, {"x": "ndarray"}, [{"x": np.arange(115, dtype=np.int8)}])
    (path,) = sorted(tmp_path.glob("*.mds"))
    data = path.read_bytes()
    at = len(data) - 118  # the dtype byte, then the shape byte, 1 dimension, 115 values
    assert data[at + 1 : at + 3] == bytes([4, 115])
    # 2 dimensions of 8 bytes each (shape byte 2 << 2 | 3), then 100 values: same length.
    forged = data[: at + 1] + bytes([11]) + np.array(dims, "<u8").tobytes() + bytes(100)
    path.write_bytes(forged)
    with MDSSource(tmp_path) as src, pytest.raises(FormatError, match=rf"column 'x': {said}"):
        src.read(0, np.arange(1))


def test_a_shard_cut_after_open_is_an_eof_naming_it(tmp_path: Path) -> None:
    path, data = _shard(tmp_path)
    with MDSSource(tmp_path, reader="pread", shuffle=False) as src:
        src.read(0, np.arange(1))
        path.write_bytes(bytes(data[:-20]))
        with pytest.raises(ReadEOFError, match=r"shard\.00000\.mds"):
            src.read(0, np.arange(6))


def test_a_pickled_copy_reads_the_same_batches_without_reading_the_index(
    mds: tuple[Path, list[dict[str, Any]]],
) -> None:
    root, _ = mds
    with MDSSource(root, columns=["label", "ids"]) as src:
        want = _digest(MDSSource(root, columns=["label", "ids"]))
        blob = pickle.dumps(src)
    (root / "index.json").unlink()  # a worker's copy opens from what its parent read
    copy = pickle.loads(blob)
    assert copy.names == ["label", "ids"] and copy.stats.headers == 0
    assert _digest(copy) == want


def test_hosts_slice_the_global_batch_and_an_exact_pass_reads_each_sample_once(
    mds: tuple[Path, list[dict[str, Any]]],
) -> None:
    root, _ = mds
    with Loader(MDSSource(root, columns=["label"]), batch_size=6, seed=1, steps=4) as whole:
        want = [b["index"].tolist() for b in whole]
    got: list[list[list[int]]] = []
    for rank in range(3):
        kw = {"rank": rank, "world_size": 3}
        with Loader(MDSSource(root, columns=["label"]), batch_size=6, seed=1, steps=4, **kw) as ld:
            got.append([b["index"].tolist() for b in ld])
    assert [[i for g in got for i in g[step]] for step in range(4)] == want
    with Loader(MDSSource(root, columns=["label"]), batch_size=8, seed=1, epochs=1) as ld:
        seen = [i for b in ld for i in b["index"][b["valid"]].tolist()]
    assert sorted(seen) == list(range(37))


def test_sources_of_a_mixture(tmp_path: Path) -> None:
    # Streaming's streams: one source each, weighted.
    for name, first in (("a", 0), ("b", 1000)):
        write_mds(tmp_path / name, {"y": "int"}, [{"y": first + k} for k in range(20)])
    mix = Mixture(
        {"a": MDSSource(tmp_path / "a"), "b": MDSSource(tmp_path / "b")}, [0.75, 0.25], batch_size=8
    )
    with Loader(mix, batch_size=8, seed=0, steps=3) as ld:
        batches = list(ld)
    ys = np.concatenate([b["y"] for b in batches])
    assert (ys < 1000).sum() == 18 and (ys >= 1000).sum() == 6


def test_every_read_strategy_gives_the_same_batches(
    mds: tuple[Path, list[dict[str, Any]]],
) -> None:
    root, _ = mds
    readers = ["adaptive", "mmap", "pread"] + (
        ["odirect"] if odirect_works(root / "index.json") else []
    )
    digests = {r: _digest(MDSSource(root, reader=r), batch=12) for r in readers}  # type: ignore[arg-type]
    assert len(set(digests.values())) == 1, digests


def test_check_lists_each_bad_sample_naming_its_shard(tmp_path: Path) -> None:
    path = write_two_bad_dtypes(tmp_path)
    report = check(MDSSource(tmp_path, shuffle=False), batch_size=4)  # samples are rows
    assert [p.sample for p in report.problems] == [13, 18]
    assert [p.message for p in report.problems] == [
        f"{path}: sample {i}: column 'x': dtype byte 200 names no ndarray dtype" for i in (3, 8)
    ]


def test_split_reads_the_split_folder_as_streaming_does(tmp_path: Path) -> None:
    # Streaming's StreamingDataset(remote, split="train") reads remote/train/index.json.
    write_mds(tmp_path / "train", COLUMNS, _samples(30), per_shard=7)
    write_mds(tmp_path / "val", COLUMNS, _samples(12), per_shard=5)
    for split in ("train", "val"):
        by_split = MDSSource(tmp_path, split=split)
        assert by_split.root == f"{tmp_path}/{split}"
        assert _digest(by_split) == _digest(MDSSource(tmp_path / split))
        again = pickle.loads(pickle.dumps(by_split))  # a worker's copy reads the same split
        assert again.samples_per_epoch == by_split.samples_per_epoch
        for src in (by_split, again):
            src.close()
    # The parent folder holds no index: the error names its splits.
    with pytest.raises(
        ObjectNotFoundError, match=r"it holds the splits 'train', 'val': give split='train'"
    ):
        MDSSource(tmp_path)
    with pytest.raises(ObjectNotFoundError, match=r"test\b.*no such file"):
        MDSSource(tmp_path, split="test")
    for bad in ("", "/train", "train/", "../train", "a/./b", 3):
        with pytest.raises(ConfigError, match="split must name a folder below root"):
            MDSSource(tmp_path, split=bad)  # type: ignore[arg-type]
