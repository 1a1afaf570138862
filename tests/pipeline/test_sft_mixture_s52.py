"""An LLM fine-tuned on a mixture of SFT datasets, as its user mixes them.

Hugging Face ``save_to_disk`` folders of ``input_ids`` and ``labels`` (int64, -100 on the
prompt's tokens), written by ``datasets``: packed with their labels
(``table_token_files(..., labels="labels")``, ``targets="documents"``), padded
(``TableSource``, mapped to the packed layout), beside a nanoGPT ``train.bin``. Every
sample of every batch is checked against a NumPy reading of its source's files (the
batch's ``source`` says which), on one host, two hosts resumed from a state, and a torch
DataLoader of two workers; what does not mix is refused saying exactly what to pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import DataError, FormatError
from headrace.formats import TableSource, TokenSource, table_token_files
from headrace.pipeline import Loader, Mapped, Mixture

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")

L, B, ROWS, IGNORE = 16, 8, 160, -100


def sft_folder(path: Path, seed: int, ids_type: str) -> None:
    """An SFT dataset as a user's ``datasets`` map writes it: labels int64, -100 at the
    prompt's tokens; two shards."""
    from datasets import Features, Sequence, Value

    rng = np.random.default_rng(seed)
    ids, labels = [], []
    for _ in range(ROWS):
        k = int(rng.integers(3, 3 * L))
        prompt = int(rng.integers(1, k))
        row = rng.integers(1, 50_000, k).tolist()
        ids.append(row)
        labels.append([IGNORE] * prompt + row[prompt:])
    features = Features(
        {"input_ids": Sequence(Value(ids_type)), "labels": Sequence(Value("int64"))}
    )
    ds = datasets.Dataset.from_dict({"input_ids": ids, "labels": labels}, features=features)
    ds.save_to_disk(str(path), num_shards=2)


def arrow_rows(path: Path) -> tuple[list[list[int]], list[list[int]]]:
    """The folder's rows in stored order, read with pyarrow (no headrace)."""
    ids: list[list[int]] = []
    labels: list[list[int]] = []
    for f in sorted(path.glob("data-*.arrow")):
        table = pa.ipc.open_stream(pa.memory_map(str(f))).read_all()
        ids += table["input_ids"].to_pylist()
        labels += table["labels"].to_pylist()
    return ids, labels


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("sft_mix")
    sft_folder(d / "chat", 1, "int32")
    sft_folder(d / "code", 2, "uint16")
    rng = np.random.default_rng(3)
    web = rng.integers(0, 50_257, 20_000).astype(np.uint16)
    web[::61] = 50_256  # GPT-2's <|endoftext|>
    web.tofile(d / "train.bin")
    return d


def packed(path: Path) -> TokenSource:
    files = table_token_files(str(path), "input_ids", labels="labels")
    return TokenSource(files, context=L, positions="documents", targets="documents")


def as_packed(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """A padded table's row as a packed sample: x the ids, y the next labels (-100 past the
    row: the table pads labels with ignore_index), positions 0.. (one document)."""
    n = len(arrays["input_ids"])
    return {
        "x": np.ascontiguousarray(arrays["input_ids"][:, :-1]),
        "y": np.ascontiguousarray(arrays["labels"][:, 1:]),
        "position_ids": np.broadcast_to(np.arange(L, dtype=np.int32), (n, L)).copy(),
    }


def padded(path: Path) -> Mapped:
    table = TableSource(str(path), columns=["input_ids", "labels"], width=L + 1, truncate=True)
    return Mapped(table, as_packed)


class PackedBytes:
    """A NumPy packing of a folder: the rows' ids and labels concatenated; a sample is
    found by its ids (random ids: a run of 4 is unique) and its y and positions checked."""

    def __init__(self, path: Path) -> None:
        ids, labels = arrow_rows(path)
        self.ids = np.concatenate([np.asarray(r, np.int64) for r in ids])
        self.labels = np.concatenate([np.asarray(r, np.int64) for r in labels])
        lengths = np.array([len(r) for r in ids])
        first = np.cumsum(lengths) - lengths
        self.begins = np.zeros(self.ids.size + 1, bool)
        self.begins[first] = True
        self.in_doc = np.arange(self.ids.size) - np.repeat(first, lengths)
        self.at: dict[bytes, int] = {}
        for s in range(self.ids.size - L):
            self.at.setdefault(self.ids[s : s + 4].tobytes(), s)

    def check(self, x: np.ndarray, y: np.ndarray, pos: np.ndarray) -> None:
        s = self.at[x[:4].astype(np.int64).tobytes()]
        assert np.array_equal(x, self.ids[s : s + L])
        want = self.labels[s + 1 : s + L + 1].copy()
        want[self.begins[s + 1 : s + L + 1]] = IGNORE  # a target that begins a document
        assert np.array_equal(y, want)
        # A sample's first token starts a document at 0 (a continuation is not marked).
        assert np.array_equal(pos, np.minimum(self.in_doc[s : s + L], np.arange(L)))


class PaddedBytes:
    """Each row's first L + 1 ids and labels, padded by hand (0 and -100)."""

    def __init__(self, path: Path) -> None:
        self.rows: dict[bytes, np.ndarray] = {}
        for ids, labels in zip(*arrow_rows(path), strict=True):
            x = np.zeros(L + 1, np.int64)
            y = np.full(L + 1, IGNORE, np.int64)
            x[: min(len(ids), L + 1)] = ids[: L + 1]
            y[: min(len(labels), L + 1)] = labels[: L + 1]
            self.rows[x[:-1].tobytes()] = y[1:]

    def check(self, x: np.ndarray, y: np.ndarray, pos: np.ndarray) -> None:
        assert np.array_equal(y, self.rows[x.astype(np.int64).tobytes()])
        assert np.array_equal(pos, np.arange(L))


def check_every_sample(batches: list[dict[str, Any]], mix: Mixture, refs: dict[str, Any]) -> int:
    seen = 0
    for b in batches:
        for i, s in enumerate(b["source"].tolist()):
            refs[mix.names[s]].check(b["x"][i], b["y"][i], b["position_ids"][i])
            seen += 1
    return seen


def chat_mix(root: Path) -> Mixture:
    return Mixture(
        {"packed": packed(root / "chat"), "padded": padded(root / "chat")},
        [0.6, 0.4],
        batch_size=B,
    )


def hosts(root: Path, world: int, stop: int, state: Any = None) -> tuple[list[Any], Any]:
    parts, saved = [], None
    for rank in range(world):
        with Loader(
            chat_mix(root), batch_size=B, seed=7, rank=rank, world_size=world, steps=stop
        ) as ld:
            if state is not None:
                ld.load_state_dict(state)
            parts.append([{k: v.copy() for k, v in b.items()} for b in ld])
            saved = saved or ld.state_dict()
    steps = [
        {k: np.concatenate([p[i][k] for p in parts]) for k in parts[0][i]}
        for i in range(len(parts[0]))
    ]
    return steps, saved


def test_packed_beside_padded_every_sample_is_its_files_bytes_on_hosts_resumed(root: Path) -> None:
    whole, _ = hosts(root, 1, 40)
    assert {k: str(v.dtype) for k, v in whole[0].items()} == {
        "x": "int32",
        "y": "int64",
        "position_ids": "int32",
        "source": "int32",
    }
    mix = chat_mix(root)
    refs = {"packed": PackedBytes(root / "chat"), "padded": PaddedBytes(root / "chat")}
    assert check_every_sample(whole, mix, refs) == 40 * B
    assert set(np.concatenate([b["source"] for b in whole]).tolist()) == {0, 1}
    first, state = hosts(root, 2, 15)
    rest, _ = hosts(root, 2, 40, state)
    assert len(first + rest) == len(whole)
    for got, want in zip(first + rest, whole, strict=True):
        for k in want:
            assert np.array_equal(got[k], want[k]), k


def test_packed_beside_padded_through_a_torch_dataloader_of_two_workers(root: Path) -> None:
    torch = pytest.importorskip("torch")
    from headrace.torch import TorchDataset

    whole, _ = hosts(root, 1, 24)
    ds = TorchDataset(chat_mix(root), batch_size=B, seed=7, steps=24, rank=0, world_size=1)
    # forkserver: a fork of this process, where another test may have imported JAX,
    # warns; spawn started each worker bare, a torch import each (13 -> 7.5 s at load 7).
    loader = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=2, multiprocessing_context="forkserver"
    )
    got = [{k: v.numpy() for k, v in b.items()} for b in loader]
    assert len(got) == len(whole)
    for g, w in zip(got, whole, strict=True):
        for k in w:
            assert np.array_equal(g[k], w[k]), k


def widen_x_int32(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    return {**arrays, "x": arrays["x"].astype(np.int32)}


def test_packed_sources_of_two_id_dtypes_are_told_to_widen_x_only(root: Path) -> None:
    """int32 ids beside uint16 ids, y int64 (labels) in both: the refusal's function must
    widen x alone. Until 2026-12-07 it cast x and y to int32, and the mixture that
    followed the advice was refused again (y int32 beside int64)."""
    mix = Mixture(
        {"chat": packed(root / "chat"), "code": packed(root / "code")}, [1, 1], batch_size=B
    )
    with pytest.raises(DataError) as caught:
        with Loader(mix, batch_size=B, seed=0) as ld:
            next(iter(ld))
    msg = str(caught.value)
    assert "widen 'code' with Mapped(source, fn), fn(arrays, samples) returning " in msg
    assert "{**arrays, 'x': arrays['x'].astype(np.int32)}" in msg
    assert "'y': arrays['y'].astype" not in msg
    # The advice, taken: every sample is its folder's bytes.
    mix = Mixture(
        {"chat": packed(root / "chat"), "code": Mapped(packed(root / "code"), widen_x_int32)},
        [1, 1],
        batch_size=B,
    )
    with Loader(mix, batch_size=B, seed=0, steps=20) as ld:
        batches = [{k: v.copy() for k, v in b.items()} for b in ld]
    refs = {"chat": PackedBytes(root / "chat"), "code": PackedBytes(root / "code")}
    assert check_every_sample(batches, mix, refs) == 20 * B


def web_as_sft(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    return {**arrays, "y": arrays["y"].astype(np.int64)}


def test_packed_sft_beside_a_pretraining_bin_is_told_what_to_pass(root: Path) -> None:
    """y int64 with -100 (labels) beside a nanoGPT uint16 file's y: the refusal names the
    cast of y, and that the plain source masks nothing (targets='documents')."""
    web = TokenSource(
        str(root / "train.bin"), context=L, dtype="uint16", positions="eos", eos_id=50_256
    )
    mix = Mixture({"chat": packed(root / "code"), "web": web}, [1, 1], batch_size=B)
    with pytest.raises(DataError) as caught:
        with Loader(mix, batch_size=B, seed=0) as ld:
            next(iter(ld))
    msg = str(caught.value)
    assert "widen 'web' with Mapped(source, fn), fn(arrays, samples) returning " in msg
    assert "{**arrays, 'y': arrays['y'].astype(np.int64)}" in msg
    assert "write one source's files in the other's dtype" not in msg  # both are uint16
    assert "targets='documents'" in msg and "ignore_index=-100" in msg
    # Taken: one y dtype, one ignore index; the web's targets that begin a document masked.
    web = TokenSource(
        str(root / "train.bin"),
        context=L,
        dtype="uint16",
        positions="eos",
        eos_id=50_256,
        targets="documents",
    )
    mix = Mixture(
        {"chat": packed(root / "code"), "web": Mapped(web, web_as_sft)}, [1, 1], batch_size=B
    )
    stream = np.fromfile(root / "train.bin", np.uint16).astype(np.int64)
    at = {stream[i : i + 4].tobytes(): i for i in range(stream.size - L)}
    code = PackedBytes(root / "code")
    with Loader(mix, batch_size=B, seed=0, steps=12) as ld:
        for b in ld:
            assert b["y"].dtype == np.int64 and b["x"].dtype == np.uint16
            for i, s in enumerate(b["source"].tolist()):
                x, y = b["x"][i], b["y"][i]
                if s == 0:
                    code.check(x, y, b["position_ids"][i])
                    continue
                start = at[x[:4].astype(np.int64).tobytes()]
                assert np.array_equal(x, stream[start : start + L])
                want = stream[start + 1 : start + L + 1].copy()
                want[x == 50_256] = IGNORE  # the target after <|endoftext|> begins a document
                assert np.array_equal(y, want)


def sft_with_labels(path: Path, labels_row_1: list[int]) -> None:
    from datasets import Features, Sequence, Value

    features = Features({"input_ids": Sequence(Value("int32")), "labels": Sequence(Value("int64"))})
    ids = [[1, 2, 3, 4, 5], [6, 7, 8], [9, 10, 11, 12], [13, 14]]
    labels = [[IGNORE, IGNORE, 3, 4, 5], labels_row_1, [IGNORE, 10, 11, 12], [IGNORE, 14]]
    ds = datasets.Dataset.from_dict({"input_ids": ids, "labels": labels}, features=features)
    ds.save_to_disk(str(path), num_shards=2)  # row 1 is the first shard's second


@pytest.mark.parametrize(
    ("case", "row_1"), [("shorter", [IGNORE, 7]), ("longer", [IGNORE, 7, 8, 99])]
)
def test_a_table_whose_labels_row_is_not_as_long_as_its_ids_is_refused(
    tmp_path: Path, case: str, row_1: list[int]
) -> None:
    """A labels row of another length pairs labels with the wrong tokens (shorter: padded
    with -100 silently until 2026-12-07); refused, as the packed reader refuses it, naming
    the file, row and both lengths. Labels of a seq2seq model's decoder (T5's, other
    lengths by design) read with label_columns=['labels'], unpaired."""
    sft_with_labels(tmp_path / case, row_1)
    src = TableSource(str(tmp_path / case), width=6, shuffle=False)
    with pytest.raises(FormatError) as caught:
        src.read(0, np.arange(4))
    msg = str(caught.value)
    assert "data-00000-of-00002.arrow" in msg and "row 1" in msg
    assert f"{len(row_1)} labels" in msg and "3 ids in 'input_ids'" in msg
    assert "label_columns=['labels']" in msg
    assert src.read(0, np.array([0, 2, 3]))["labels"].shape == (3, 6)  # the others read
    seq2seq = TableSource(str(tmp_path / case), width=6, shuffle=False, label_columns=["labels"])
    got = seq2seq.read(0, np.arange(4))["labels"]
    want = np.full(6, IGNORE)
    want[: len(row_1)] = row_1
    assert np.array_equal(got[1], want)


def test_a_seq2seq_tables_decoder_labels_read_as_before_without_options(tmp_path: Path) -> None:
    """A T5-style table (labels: the decoder's targets, tokens and lengths of their own)
    is read with the default label_columns as before: only a row whose kept labels are its
    ids (a causal row cut apart) is refused."""
    from datasets import Features, Sequence, Value

    features = Features({"input_ids": Sequence(Value("int32")), "labels": Sequence(Value("int64"))})
    ids = [[21, 22, 23, 24, 1], [25, 26, 1], [27, 28, 29, 1]]
    labels = [[31, 1], [32, 33, 34, 35, 1], [36, 1]]
    datasets.Dataset.from_dict(
        {"input_ids": ids, "labels": labels}, features=features
    ).save_to_disk(str(tmp_path / "t5"))
    got = TableSource(str(tmp_path / "t5"), width=6, shuffle=False).read(0, np.arange(3))
    for i, row in enumerate(labels):
        want = np.full(6, IGNORE)
        want[: len(row)] = row
        assert np.array_equal(got["labels"][i], want)


def test_parquet_labels_paired_by_name_and_checked_row_by_row(tmp_path: Path) -> None:
    """label_columns={'labels': 'ids'} pairs other names; check() lists the one row whose
    labels are short (by its sample), and reads the others."""
    from headrace.errors import ConfigError
    from headrace.pipeline import check

    pq = pytest.importorskip("pyarrow.parquet")
    ids = pa.array([[1, 2, 3], [4, 5, 6, 7], [8, 9]], pa.list_(pa.int32()))
    labels = pa.array([[IGNORE, 2, 3], [IGNORE, 5], [IGNORE, 9]], pa.list_(pa.int64()))
    pq.write_table(pa.table({"ids": ids, "target": labels}), tmp_path / "sft.parquet")
    path = str(tmp_path / "sft.parquet")
    assert TableSource(path, width=5).read(0, np.arange(3))["target"].shape == (3, 5)  # unpaired
    with pytest.raises(ConfigError, match=r"\{'target': 'input_ids'\}"):
        TableSource(path, width=5, label_columns={"target": "input_ids"})
    src = TableSource(path, width=5, shuffle=False, label_columns={"target": "ids"})
    report = check(src, batch_size=1)
    assert [p.sample for p in report.problems] == [1]
    assert "row 1 (sample 1) has 2 labels but 4 ids in 'ids'" in report.problems[0].message
    assert "sft.parquet" in report.problems[0].message
    assert src.read(0, np.array([0, 2]))["target"][0].tolist() == [IGNORE, 2, 3, IGNORE, IGNORE]
