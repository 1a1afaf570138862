"""Packed SFT: ``targets="documents"`` (no target across documents, the last column's
too) and a ``labels`` column read beside ``input_ids`` (``table_token_files(...,
labels="labels")``), on a ``datasets.save_to_disk`` dataset, against a NumPy packing of
the concatenated columns built here: x, y and position_ids over steps that cross
shards, resumed mid-run and over 2 hosts; the options in the state; rows of other
lengths refused by name."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from headrace.errors import ConfigError, DataError, StateError
from headrace.formats import TokenSource, table_token_files
from headrace.pipeline import Loader

datasets = pytest.importorskip("datasets")

L = 16
IGNORE = -100


def _sft(root: Path, seed: int = 0, n: int = 200) -> tuple[Any, Any, Any]:
    """Conversations of 0 to 3L tokens, the first p of each (the prompt) labelled -100, as a
    tokenizer's ``map`` saves them (``input_ids`` int32, ``labels`` int64); the columns'
    concatenations and where each row starts (then the total)."""
    rng = np.random.default_rng(seed)
    ids, labels = [], []
    for _ in range(n):
        k = int(rng.choice([0, 1, int(rng.integers(2, 3 * L + 1))]))
        p = int(rng.integers(0, k + 1))
        t = rng.integers(0, 32000, k).astype(np.int32)
        lab = t.astype(np.int64)
        lab[:p] = IGNORE
        ids.append(t)
        labels.append(lab)
    feats = datasets.Features(
        {
            "input_ids": datasets.Sequence(datasets.Value("int32")),
            "labels": datasets.Sequence(datasets.Value("int64")),
        }
    )
    ds = datasets.Dataset.from_dict(
        {"input_ids": [a.tolist() for a in ids], "labels": [a.tolist() for a in labels]},
        features=feats,
    )
    ds.save_to_disk(str(root), num_shards=3)
    firsts = np.cumsum([0] + [len(r) for r in ids])
    return np.concatenate(ids), np.concatenate(labels), firsts


def _reference(stream: Any, targets: Any, firsts: Any, o: int, mask: bool) -> tuple[Any, ...]:
    """x, y and position_ids of the sample at token ``o``, packed by hand: y the targets
    stream's next token, the ignore index where it begins a row when ``mask``."""
    x = stream[o : o + L]
    y = targets[o + 1 : o + L + 1].astype(np.int64)
    starts = set(firsts.tolist())
    if mask:
        for j in range(L):
            if o + j + 1 in starts:
                y[j] = IGNORE
    pos = [min(o + j - int(firsts[firsts <= o + j].max()), j) for j in range(L)]
    return x, y, np.array(pos)


def _offsets(stream: Any) -> dict[bytes, int]:
    """Where each L-gram of the stream lies (its ids are random: each one is unique)."""
    return {stream[o : o + L].tobytes(): o for o in range(stream.size - L)}


def _check(batches: list[Any], stream: Any, targets: Any, firsts: Any, mask: bool) -> None:
    at = _offsets(stream)
    crossed = 0
    for b in batches:
        for i in range(len(b["x"])):
            o = at[b["x"][i].tobytes()]
            x, y, p = _reference(stream, targets, firsts, o, mask)
            np.testing.assert_array_equal(b["x"][i], x)
            np.testing.assert_array_equal(b["y"][i], y)
            np.testing.assert_array_equal(b["position_ids"][i], p)
            crossed += int(o + L in set(firsts.tolist()))  # the last column's target
    assert crossed, "no sample's last target begins a document: the test shows nothing"


def _resumed_on_two_hosts(make: Any, whole: list[Any], steps: int) -> None:
    with Loader(make(), batch_size=4, seed=3, steps=steps) as ld:
        it = iter(ld)
        for _ in range(3):
            next(it)
        state = ld.state_dict()
    parts = []
    for rank in range(2):
        ld = Loader(make(), batch_size=4, seed=3, steps=steps, rank=rank, world_size=2)
        ld.load_state_dict(state)
        with ld:
            parts.append(list(ld))
    assert len(parts[0]) == steps - 3
    for t, halves in enumerate(zip(*parts, strict=True)):
        for key in ("x", "y", "position_ids"):
            got = np.concatenate([h[key] for h in halves])
            np.testing.assert_array_equal(got, whole[3 + t][key])
            assert got.dtype == whole[3 + t][key].dtype


def _ids_only(root: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the labels column, warned of
        return table_token_files(root, "input_ids")


def test_targets_documents_masks_every_target_that_begins_a_row(tmp_path: Path) -> None:
    stream, _, firsts = _sft(tmp_path / "ds")

    def make() -> TokenSource:
        return TokenSource(
            _ids_only(tmp_path / "ds"),
            context=L,
            positions="documents",
            targets="documents",
            window_bytes=4096,
        )

    src = make()
    steps = src.samples_per_epoch // 4
    with Loader(src, batch_size=4, seed=3, steps=steps) as ld:
        whole = list(ld)
    assert whole[0]["y"].dtype == np.int32 and whole[0]["x"].dtype == np.int32
    _check(whole, stream, stream, firsts, mask=True)
    _resumed_on_two_hosts(make, whole, steps)
    assert src.ignore_index == IGNORE


def test_a_labels_column_is_read_beside_input_ids(tmp_path: Path) -> None:
    stream, labels, firsts = _sft(tmp_path / "ds", seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the labels are read: nothing to warn of
        (tf,) = table_token_files(tmp_path / "ds", "input_ids", labels="labels")

    def make(**kw: Any) -> TokenSource:
        return TokenSource([tf], context=L, positions="documents", window_bytes=4096, **kw)

    src = make(targets="documents")
    steps = src.samples_per_epoch // 4
    assert steps > 20  # several windows of 4 KiB: the steps cross shards
    with Loader(src, batch_size=4, seed=3, steps=steps) as ld:
        whole = list(ld)
    assert whole[0]["y"].dtype == np.int64 and whole[0]["x"].dtype == np.int32
    _check(whole, stream, labels, firsts, mask=True)
    _resumed_on_two_hosts(lambda: make(targets="documents"), whole, steps)
    # Without targets=, y is the labels' next value, the one across rows too.
    with Loader(make(), batch_size=4, seed=3, steps=steps) as ld:
        _check(list(ld), stream, labels, firsts, mask=False)


def test_a_state_with_the_options_is_refused_without_them(tmp_path: Path) -> None:
    _sft(tmp_path / "ds", n=40)
    (labelled,) = table_token_files(tmp_path / "ds", "input_ids", labels="labels")
    plain = _ids_only(tmp_path / "ds")

    def state(src: TokenSource) -> Any:
        with Loader(src, batch_size=4, seed=0) as ld:
            next(iter(ld))
            return ld.state_dict()

    kw: dict[str, Any] = {"context": L, "positions": "documents", "window_bytes": 4096}
    masked = state(TokenSource(plain, targets="documents", **kw))
    with pytest.raises(StateError, match="targets"):
        Loader(TokenSource(plain, **kw), batch_size=4, seed=0).load_state_dict(masked)
    other = TokenSource(plain, targets="documents", ignore_index=-1, **kw)
    with pytest.raises(StateError, match="ignore_index"):
        Loader(other, batch_size=4, seed=0).load_state_dict(masked)
    with pytest.raises(StateError, match="labels"):
        Loader(TokenSource(plain, **kw), batch_size=4, seed=0).load_state_dict(
            state(TokenSource([labelled], **kw))
        )
    # A run without them keeps its state and fingerprint as before.
    fp = TokenSource(plain, **kw).fingerprint()
    assert "targets" not in fp and "ignore_index" not in fp
    assert "labels" not in fp["files"][0]


def _write(path: Path, batches: list[tuple[list[Any], list[Any]]]) -> None:
    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("labels", pa.list_(pa.int64()))])
    with pa.ipc.new_stream(str(path), schema) as w:
        for ids, labels in batches:
            w.write_batch(
                pa.record_batch(
                    [pa.array(ids, schema[0].type), pa.array(labels, schema[1].type)],
                    schema=schema,
                )
            )


def test_labels_of_another_length_are_refused_by_file_batch_and_row(tmp_path: Path) -> None:
    path = tmp_path / "data-00000-of-00001.arrow"
    good = ([[1, 2, 3], [4, 5]], [[-100, 2, 3], [-100, 5]])
    bad = ([[6, 7], [8, 9, 10], [11]], [[-100, 7], [-100, 9], [11]])  # row 3 short
    _write(path, [good, bad])
    with pytest.raises(DataError) as got:
        table_token_files(path, "input_ids", labels="labels")
    said = str(got.value)
    assert str(path) in said and "record batch 1" in said and "row 3" in said
    assert "'labels'" in said and "2 " in said and "3 " in said
    # The same shape of rows reads; a labels column that is not there is named.
    _write(path, [good])
    (tf,) = table_token_files(path, "input_ids", labels="labels")
    assert tf.labels is not None and tf.labels.num_tokens == tf.num_tokens == 5
    with pytest.raises(ConfigError, match="no column 'target'"):
        table_token_files(path, "input_ids", labels="target")


def test_eos_and_bos_documents_mask_their_crossing_targets(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    tokens = rng.integers(1, 1000, 4000).astype(np.uint16)
    tokens[rng.choice(4000, 300, replace=False)] = 0  # the delimiter
    path = tmp_path / "train.bin"
    tokens.tofile(path)
    for mode, key in (("eos", "eos_id"), ("bos", "bos_id")):
        src = TokenSource(path, context=L, positions=mode, targets="documents", **{key: 0})
        b = src.read(0, np.arange(64, dtype=np.int64))
        _, offsets = src.starts(0, np.arange(64, dtype=np.int64))
        assert b["y"].dtype == np.int32  # uint16 ids, and -100 beside them
        for i, o in enumerate(offsets.tolist()):
            y = tokens[o + 1 : o + L + 1].astype(np.int64)
            # eos ends a document: the token after it begins the next; bos begins one.
            begins = tokens[o : o + L] == 0 if mode == "eos" else y == 0
            y[begins] = IGNORE
            np.testing.assert_array_equal(b["y"][i], y)
            np.testing.assert_array_equal(b["x"][i], tokens[o : o + L])


def test_the_options_are_refused_where_they_cannot_apply(tmp_path: Path) -> None:
    tokens = np.arange(1, 400, dtype=np.uint16)
    path = tmp_path / "train.bin"
    tokens.tofile(path)
    with pytest.raises(ConfigError, match=r"targets='documents'.*positions"):
        TokenSource(path, context=L, targets="documents")
    with pytest.raises(ConfigError, match="targets must be"):
        TokenSource(path, context=L, positions="eos", eos_id=0, targets="docs")
    with pytest.raises(ConfigError, match="ignore_index"):
        TokenSource(path, context=L, ignore_index=-1)
    with pytest.raises(ConfigError, match="ignore_index"):
        TokenSource(path, context=L, positions="eos", eos_id=0, targets="documents",
                    ignore_index=1.5)  # fmt: skip
    # Without the options y is a view of the ids as before (no copy, the ids' dtype).
    b = TokenSource(path, context=L).read(0, np.arange(4, dtype=np.int64))
    assert b["y"].dtype == np.uint16 and b["y"].base is b["x"].base


@pytest.fixture(scope="module")
def s3() -> Any:
    pytest.importorskip("moto")
    from headrace.emulate import LocalS3

    with LocalS3() as server:
        server.create_bucket("labels-s52")
        yield server


def _upload(server: Any, folder: Path, prefix: str) -> str:
    client = server.info.boto3_client()
    for f in sorted(folder.iterdir()):
        client.put_object(Bucket="labels-s52", Key=f"{prefix}/{f.name}", Body=f.read_bytes())
    return f"s3://labels-s52/{prefix}"


def test_labels_on_object_storage_read_as_the_local_folder(tmp_path: Path, s3: Any) -> None:
    _sft(tmp_path / "ds", seed=2, n=120)
    url = _upload(s3, tmp_path / "ds", "ds")  # the folder's name: its fingerprint
    opts = s3.info.store_options()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the labels are read: nothing to warn of
        (remote,) = table_token_files(url, "input_ids", labels="labels", store_options=opts)
    (local,) = table_token_files(tmp_path / "ds", "input_ids", labels="labels")
    assert remote.labels is not None and local.labels is not None
    np.testing.assert_array_equal(remote.labels.bounds, local.labels.bounds)  # type: ignore[arg-type]
    kw: dict[str, Any] = {"context": L, "positions": "documents", "targets": "documents"}
    with (
        Loader(TokenSource([local], window_bytes=4096, **kw), batch_size=4, seed=5) as a,
        Loader(
            TokenSource([remote], window_bytes=4096, store_options=opts, **kw),
            batch_size=4,
            seed=5,
        ) as b,
    ):
        assert a.source.fingerprint() == b.source.fingerprint()
        for one, other, _ in zip(a, b, range(12), strict=False):
            for key in ("x", "y", "position_ids"):
                np.testing.assert_array_equal(one[key], other[key])
                assert one[key].dtype == other[key].dtype
    # Rows of another length in an object are refused by name there too.
    bad = tmp_path / "bad"
    bad.mkdir()
    _write(bad / "data.arrow", [([[1, 2, 3]], [[-100, 2, 3]]), ([[4, 5]], [[5]])])
    with pytest.raises(DataError, match=r"sft-bad/data\.arrow: row 1 \(record batch 1\)"):
        table_token_files(
            _upload(s3, bad, "sft-bad"), "input_ids", labels="labels", store_options=opts
        )
