"""``TokenSource(positions="bos", bos_id=...)``: documents that *begin* with a token.

llm.c's and modded-nanogpt's ``fineweb.py`` write the end-of-text token 50256 at the
start of each document, as a delimiter (``tokens = [eot]; tokens.extend(...)``), and
modded-nanogpt's document mask starts a document at each one. ``positions="eos"``
starts one after it: each document's delimiter was counted as the previous
document's last token. These shards are written as fineweb.py writes them (a 1,024-byte
header: magic 20240520, version 1, token count; then uint16 tokens), and each row's
``position_ids`` is checked against a plain Python count over the row's own tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError, StateError
from headrace.formats import TokenSource, cu_seqlens
from headrace.pipeline import Loader
from headrace.testing import batch_digest

BOS = 50256  # GPT-2's <|endoftext|>, as fineweb.py writes it before each document
L = 32


def fineweb_shard(path: Path, docs: list[list[int]]) -> None:
    """A shard as fineweb.py's tokenize() and llm.c's write_datafile write one."""
    tokens = np.array([t for doc in docs for t in [BOS, *doc]], dtype=np.uint16)
    header = np.zeros(256, dtype=np.int32)
    header[:3] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())


def reference(row: list[int]) -> list[int]:
    """Each token's position in its document: 0 at column 0 and at every BOS."""
    out: list[int] = []
    for j, tok in enumerate(row):
        out.append(0 if j == 0 or tok == BOS else out[-1] + 1)
    return out


@pytest.fixture
def shards(tmp_path: Path) -> list[Path]:
    """Two shards of documents of 0..70 text tokens (an empty one is a lone BOS, so two
    BOS follow each other here and there)."""
    rng = np.random.default_rng(50)
    paths = []
    for i in range(2):
        docs = [rng.integers(0, BOS, n).tolist() for n in rng.integers(0, 71, 150)]
        path = tmp_path / f"fineweb_train_{i + 1:06d}.bin"
        fineweb_shard(path, docs)
        paths.append(path)
    return paths


def source(paths: list[Path], **kw: Any) -> TokenSource:
    return TokenSource(paths, context=L, window_bytes=8 << 10, block_bytes=4096, **kw)


def test_positions_start_at_every_bos(shards: list[Path]) -> None:
    src = source(shards, positions="bos", bos_id=BOS)
    samples = np.arange(src.samples_per_epoch, dtype=np.int64)
    batch = src.read(7, samples)
    x, pos = batch["x"], batch["position_ids"]
    assert pos.shape == x.shape and pos.dtype == np.int32
    for row, got in zip(x.tolist(), pos.tolist(), strict=True):
        assert got == reference(row)
    inside = (x[:, 1:] == BOS).sum(axis=1)
    assert (inside >= 2).any()  # several documents in a row
    assert (x[:, 0] != BOS).any()  # a row starting mid-document
    assert (x[:, 0] == BOS).any()  # a BOS in column 0
    assert ((x[:, :-1] == BOS) & (x[:, 1:] == BOS)).any()  # an empty document
    # "eos" put each BOS after a text token at the end of the document before.
    eos_src = source(shards, positions="eos", eos_id=BOS)
    eos = eos_src.read(7, samples)["position_ids"]
    at = np.nonzero((x[:, 1:] == BOS) & (x[:, :-1] != BOS))
    assert (pos[:, 1:][at] == 0).all() and (eos[:, 1:][at] > 0).all()
    src.close()
    eos_src.close()


def test_cu_seqlens_cut_the_batch_at_every_bos(shards: list[Path]) -> None:
    src = source(shards, positions="bos", bos_id=BOS)
    batch = src.read(2, np.arange(40, dtype=np.int64))
    cu, longest = cu_seqlens(batch["position_ids"])
    flat = batch["x"].reshape(-1).tolist()
    want = [i for i, t in enumerate(flat) if i % L == 0 or t == BOS] + [len(flat)]
    assert cu.tolist() == want and longest == max(np.diff(want))
    src.close()


def test_the_same_batches_on_any_host_count_and_after_a_resume(shards: list[Path]) -> None:
    def run(**kw: Any) -> list[dict[str, Any]]:
        with Loader(
            source(shards, positions="bos", bos_id=BOS), batch_size=16, seed=4, steps=20, **kw
        ) as ld:
            return [{k: v.copy() for k, v in b.items()} for b in ld]

    one = run()
    for b in one:
        assert b["position_ids"].tolist() == [reference(r) for r in b["x"].tolist()]
    halves = [run(rank=r, world_size=2) for r in range(2)]
    merged = [{k: np.concatenate([a[k], b[k]]) for k in a} for a, b in zip(*halves, strict=True)]
    assert batch_digest(iter(merged)) == batch_digest(iter(one))

    with Loader(source(shards, positions="bos", bos_id=BOS), batch_size=16, seed=4, steps=20) as ld:
        it = iter(ld)
        for _ in range(7):
            next(it)
        state = ld.state_dict()
    again = Loader(
        source(shards, positions="bos", bos_id=BOS),
        batch_size=16,
        seed=4,
        steps=20,
        rank=1,
        world_size=2,
    )
    with again:
        again.load_state_dict(state)
        rest = [{k: v.copy() for k, v in b.items()} for b in again]
    assert batch_digest(iter(rest)) == batch_digest(iter(halves[1][7:]))


@pytest.mark.parametrize(
    "other",
    [
        {"positions": "eos", "eos_id": BOS},
        {"positions": "bos", "bos_id": 0},
        {},
    ],
)
def test_a_state_saved_with_bos_is_refused_by_another_positions(
    shards: list[Path], other: dict[str, Any]
) -> None:
    with Loader(source(shards, positions="bos", bos_id=BOS), batch_size=8, seed=1) as ld:
        next(iter(ld))
        state = ld.state_dict()
    with (
        Loader(source(shards, **other), batch_size=8, seed=1) as ld,
        pytest.raises(StateError, match="saved on different data"),
    ):
        ld.load_state_dict(state)


def test_bad_bos_options_are_refused(shards: list[Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="positions='bos' needs bos_id="):
        source(shards, positions="bos")
    with pytest.raises(ConfigError, match="bos_id is only for it"):
        source(shards, bos_id=BOS)
    with pytest.raises(ConfigError, match="bos_id is only for it"):
        source(shards, positions="eos", eos_id=BOS, bos_id=BOS)
    with pytest.raises(ConfigError, match="eos_id is only for it"):
        source(shards, positions="bos", bos_id=BOS, eos_id=BOS)
    with pytest.raises(ConfigError, match=r"bos_id 70000 is not a uint16 token"):
        source(shards, positions="bos", bos_id=70000)
    with pytest.raises(ConfigError, match=r"bos_id=50256 is outside the vocabulary \[0, 50000\)"):
        source(shards, positions="bos", bos_id=BOS, vocab_size=50000)
    raw = tmp_path / "neg.bin"
    np.arange(200, dtype=np.int32).tofile(raw)
    with pytest.raises(ConfigError, match=r"bos_id=-1 is negative"):
        TokenSource(raw, dtype="int32", context=4, positions="bos", bos_id=-1)
    with pytest.raises(ConfigError, match="positions must be None, 'eos', 'bos' or 'documents'"):
        source(shards, positions="begin")  # type: ignore[arg-type]


def test_a_pickled_copy_and_a_numpy_bos_id_give_the_same_positions(shards: list[Path]) -> None:
    import pickle

    src = source(shards, positions="bos", bos_id=np.uint16(BOS))
    samples = np.arange(64, dtype=np.int64)
    want = src.read(1, samples)
    copy = pickle.loads(pickle.dumps(src))  # what a worker process gets
    assert copy.read(1, samples)["position_ids"].tolist() == [
        reference(r) for r in want["x"].tolist()
    ]
    for s in (src, copy):
        s.close()
