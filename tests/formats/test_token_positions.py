"""TokenSource(positions=...): each x token's position in its document, for document masks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from headrace.errors import ConfigError
from headrace.formats import TokenSource, cu_seqlens, write_megatron_index
from headrace.formats._positions import document_positions, eos_positions
from headrace.pipeline import Loader
from headrace.testing import batch_digest

L = 32
EOS = 9


def reference(starts: set[int], offset: int) -> list[int]:
    """Positions of L tokens from ``offset`` of a stream whose documents start at ``starts``."""
    out, pos = [], 0
    for j in range(L):
        if j > 0 and offset + j in starts:
            pos = 0
        out.append(pos)
        pos += 1
    return out


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, set[int]]:
    """A Megatron .bin/.idx of documents of 1..80 tokens, each ending with EOS (and
    no other EOS), so both ways of finding documents agree."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 81, 600)
    docs = [np.append(rng.integers(10, 5000, n - 1), EOS) for n in lengths]
    tokens = np.concatenate(docs).astype(np.uint16)
    tokens.tofile(tmp_path / "c.bin")
    write_megatron_index(tmp_path / "c.idx", np.uint16, lengths)
    starts = set(np.concatenate(([0], np.cumsum(lengths)[:-1])).tolist())
    return tmp_path / "c.bin", starts


def source(path: Path, **kw: Any) -> TokenSource:
    return TokenSource(path, context=L, window_bytes=8 << 10, block_bytes=4096, **kw)


def offsets_of(src: TokenSource, seed: int, samples: NDArray[np.int64]) -> list[int]:
    return src.starts(seed, samples)[1].tolist()


@pytest.mark.parametrize("how", ["documents", "eos"])
def test_positions_restart_at_every_document(corpus: tuple[Path, set[int]], how: str) -> None:
    path, starts = corpus
    kw: dict[str, Any] = {"positions": how, "eos_id": EOS if how == "eos" else None}
    src = source(path, **kw)
    samples = np.arange(0, 400, dtype=np.int64)
    batch = src.read(3, samples)
    pos = batch["position_ids"]
    assert pos.shape == (400, L) and pos.dtype == np.int32
    for row, offset in zip(pos, offsets_of(src, 3, samples), strict=True):
        assert row.tolist() == reference(starts, offset)
    # Starts inside rows: a document boundary in most rows of this corpus.
    assert (pos[:, 1:] == 0).any(axis=1).mean() > 0.5
    src.close()


def test_both_ways_agree_and_batches_are_the_same_on_any_host_count(
    corpus: tuple[Path, set[int]],
) -> None:
    path, _ = corpus

    def run(how: str, **kw: Any) -> list[dict[str, Any]]:
        src = source(path, positions=how, eos_id=EOS if how == "eos" else None)
        with Loader(src, batch_size=16, seed=4, steps=30, **kw) as ld:
            return [{k: v.copy() for k, v in b.items()} for b in ld]

    docs = run("documents")
    assert batch_digest(iter(docs)) == batch_digest(iter(run("eos")))
    halves = [run("documents", rank=r, world_size=2) for r in range(2)]
    merged = [{k: np.concatenate([a[k], b[k]]) for k in a} for a, b in zip(*halves, strict=True)]
    assert batch_digest(iter(merged)) == batch_digest(iter(docs))
    # x and y are unchanged by positions.
    plain = Loader(source(path), batch_size=16, seed=4, steps=30)
    with plain:
        for a, b in zip(plain, docs, strict=True):
            assert np.array_equal(a["x"], b["x"]) and np.array_equal(a["y"], b["y"])


def test_several_files_each_with_their_own_documents(tmp_path: Path) -> None:
    for name, n in (("a", 40), ("b", 70)):
        np.arange(n * 25, dtype=np.uint16).tofile(tmp_path / f"{name}.bin")
        write_megatron_index(tmp_path / f"{name}.idx", np.uint16, np.full(n, 25))
    src = TokenSource(
        [tmp_path / "a.bin", tmp_path / "b.bin"],
        context=L,
        window_bytes=4096,
        block_bytes=4096,
        positions="documents",
    )
    samples = np.arange(src.samples_per_epoch, dtype=np.int64)
    pos = src.read(0, samples)["position_ids"]
    files, offsets = src.starts(0, samples)
    assert set(files.tolist()) == {0, 1}
    for row, off in zip(pos, offsets.tolist(), strict=True):
        assert row.tolist() == reference(set(range(0, 70 * 25, 25)), off)
    src.close()


def test_the_helpers_on_hand_made_rows() -> None:
    x = np.array([[1, EOS, 2, 3, EOS, EOS, 4], [EOS, 1, 1, 1, 1, 1, EOS]])
    assert eos_positions(x, EOS).tolist() == [[0, 1, 0, 1, 2, 0, 0], [0, 0, 1, 2, 3, 4, 5]]
    bounds = np.array([0, 3, 4, 10, 12], dtype=np.int64)
    got = document_positions(bounds, np.array([0, 3, 5, 11], dtype=np.int64), 4)
    assert got.tolist() == [[0, 1, 2, 0], [0, 0, 1, 2], [0, 1, 2, 3], [0, 0, 1, 2]]


def test_bad_position_options_are_refused(corpus: tuple[Path, set[int]], tmp_path: Path) -> None:
    path, _ = corpus
    raw = tmp_path / "raw.bin"
    np.arange(1000, dtype=np.uint16).tofile(raw)
    with pytest.raises(ConfigError, match=r"raw\.bin has none .*positions='eos'"):
        TokenSource(raw, context=L, dtype="uint16", positions="documents")
    with pytest.raises(ConfigError, match="needs eos_id="):
        TokenSource(path, context=L, positions="eos")
    with pytest.raises(ConfigError, match="eos_id is only for it"):
        TokenSource(path, context=L, eos_id=3)
    with pytest.raises(ConfigError, match=r"eos_id 70000 is not a uint16 token"):
        TokenSource(path, context=L, positions="eos", eos_id=70000)
    with pytest.raises(ConfigError, match="positions must be"):
        TokenSource(path, context=L, positions="docs")  # type: ignore[arg-type]


def test_cu_seqlens_cut_the_flattened_batch_at_every_document() -> None:
    pos = np.array([[0, 1, 2, 0, 1], [0, 0, 1, 2, 3]], dtype=np.int32)
    cu, longest = cu_seqlens(pos)
    assert cu.tolist() == [0, 3, 5, 6, 10] and cu.dtype == np.int32 and longest == 4
    assert cu_seqlens(np.zeros((0, 4), np.int32))[0].tolist() == [0]
    with pytest.raises(ConfigError, match="must start every row at 0"):
        cu_seqlens(np.array([[1, 2, 3]]))
    # Row 1 continuing row 0's document would merge them into one: refused, by row.
    with pytest.raises(ConfigError, match="row 1 starts at 3"):
        cu_seqlens(np.array([[0, 1, 2], [3, 4, 5]]))
    with pytest.raises(ConfigError, match="token 2 has 5 after 1"):
        cu_seqlens(np.array([[0, 1, 5, 6]]))
    with pytest.raises(ConfigError, match="must be integers"):
        cu_seqlens(np.array([[0.0, 1.0]]))


def test_cu_seqlens_of_a_real_batch_match_its_documents(corpus: tuple[Path, set[int]]) -> None:
    path, starts = corpus
    src = source(path, positions="documents")
    samples = np.arange(40, dtype=np.int64)
    cu, longest = cu_seqlens(src.read(0, samples)["position_ids"])
    offsets = offsets_of(src, 0, samples)
    want = [0]
    for r, off in enumerate(offsets):
        want += [r * L + j for j in range(1, L) if off + j in starts] + [(r + 1) * L]
    assert cu.tolist() == want and longest == max(np.diff(want))
    src.close()


def test_a_pickled_copy_gives_the_same_positions(corpus: tuple[Path, set[int]]) -> None:
    import pickle

    path, _ = corpus
    src = source(path, positions="documents")
    samples = np.arange(64, dtype=np.int64)
    want = src.read(1, samples)["position_ids"]
    copy = pickle.loads(pickle.dumps(src))  # what a worker process gets
    assert copy._bounds == {}
    assert np.array_equal(copy.read(1, samples)["position_ids"], want)
    eos = source(path, positions="eos", eos_id=np.uint16(EOS))  # a NumPy integer is a token too
    assert np.array_equal(eos.read(1, samples)["position_ids"], want)
    for s in (src, copy, eos):
        s.close()
