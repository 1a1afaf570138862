"""A pre-training engineer's journey over token files written as the tools that make them
do: nanoGPT's ``train.bin``/``val.bin``, llm.c / modded-nanogpt shards (a 1,024-byte
header: magic 20240520, version 1, the token count), Megatron-LM ``.bin``/``.idx`` pairs
written as its ``IndexedDatasetBuilder`` writes them (documents of several sequences),
raw uint32 files with a sidecar. Every batch is checked against numpy reading the same
bytes; resumes on another host count and exact evaluation passes against one run.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import DataError, ObjectNotFoundError
from headrace.formats import TokenSource, write_token_sidecar
from headrace.pipeline import Loader, Mixture

L = 16
KW: dict[str, Any] = {"context": L, "window_bytes": 8 << 10, "block_bytes": 4096}


def llmc_shard(path: Path, tokens: np.ndarray) -> Path:
    header = np.zeros(256, dtype=np.int32)
    header[:3] = 20240520, 1, len(tokens)
    path.write_bytes(header.tobytes() + tokens.astype(np.uint16).tobytes())
    return path


def megatron_pair(prefix: Path, documents: list[list[np.ndarray]], dtype: type = np.uint16) -> Path:
    """``prefix.bin``/``.idx`` as Megatron-LM's ``IndexedDatasetBuilder`` writes them: one
    ``add_item`` a sequence, ``end_document`` after each document's sequences."""
    dt = np.dtype(dtype)
    code = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}[dt]
    lengths: list[int] = []
    doc_idx = [0]
    with open(f"{prefix}.bin", "wb") as f:
        for doc in documents:
            for seq in doc:
                f.write(seq.astype(dt).tobytes())
                lengths.append(len(seq))
            doc_idx.append(len(lengths))
    lens = np.array(lengths, dtype=np.int32)
    pointers = (np.cumsum(lens, dtype=np.int64) - lens) * dt.itemsize
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code))
        f.write(struct.pack("<Q", len(lens)) + struct.pack("<Q", len(doc_idx)))
        f.write(lens.tobytes() + pointers.tobytes() + np.array(doc_idx, np.int64).tobytes())
    return Path(f"{prefix}.bin")


def documents(rng: np.random.Generator, n: int, eod: int = 0) -> list[list[np.ndarray]]:
    """``n`` documents of 1-3 sequences (sentence-split), the last ending in ``eod``."""
    out = []
    for _ in range(n):
        seqs = [rng.integers(1, 1000, int(rng.integers(3, 40))) for _ in range(rng.integers(1, 4))]
        seqs[-1] = np.append(seqs[-1], eod)
        out.append(seqs)
    return out


def windows(tokens: np.ndarray) -> np.ndarray:
    """Every sample ``t[s:s+L+1]``, ``s`` spaced by ``L``, as numpy reads them."""
    n = (len(tokens) - 1) // L
    return np.lib.stride_tricks.sliding_window_view(tokens, L + 1)[::L][:n]


@pytest.fixture
def corpus(tmp_path: Path) -> dict[str, Any]:
    rng = np.random.default_rng(50)
    web = [rng.integers(0, 50_257, 6_000 + 517 * i).astype(np.uint16) for i in range(3)]
    for i, t in enumerate(web):
        llmc_shard(tmp_path / f"fineweb_train_{i:06d}.bin", t)
    docs = documents(rng, 300)
    (tmp_path / "code").mkdir()
    code = megatron_pair(tmp_path / "code" / "code_text_document", docs)
    val = rng.integers(0, 50_257, 5_003).astype(np.uint16)
    (tmp_path / "nanogpt").mkdir()
    val.tofile(tmp_path / "nanogpt" / "val.bin")
    return {"root": tmp_path, "web": web, "docs": docs, "code": code, "val": val}


def _web(root: Path, **kw: Any) -> TokenSource:
    return TokenSource(str(root / "fineweb_train_*.bin"), **KW, **kw)


def test_shards_megatron_and_sidecar_files_read_as_numpy_reads_them(
    corpus: dict[str, Any], tmp_path: Path
) -> None:
    src = _web(corpus["root"], shuffle=False)
    got = src.read(0, np.arange(src.samples_per_epoch))
    ref = np.concatenate([windows(t) for t in corpus["web"]])
    assert (got["x"] == ref[:, :L]).all() and (got["y"] == ref[:, 1:]).all()

    flat = np.concatenate([np.concatenate(d) for d in corpus["docs"]]).astype(np.uint16)
    code = TokenSource(corpus["code"], **KW, shuffle=False, positions="documents")
    got = code.read(0, np.arange(code.samples_per_epoch))
    assert (got["x"] == windows(flat)[:, :L]).all()
    # Documents, not sequences: a sentence-split document is one (Megatron's doc index).
    sizes = [sum(len(s) for s in d) for d in corpus["docs"]]
    bounds = code.files[0].documents()
    assert bounds.tolist() == np.concatenate([[0], np.cumsum(sizes)]).tolist()
    # position_ids from the index equal those from the EOD token each document ends with.
    eos = TokenSource(corpus["code"], **KW, shuffle=False, positions="eos", eos_id=0)
    n = code.samples_per_epoch
    assert (got["position_ids"] == eos.read(0, np.arange(n))["position_ids"]).all()

    wide = np.random.default_rng(1).integers(0, 128_000, 3_001).astype(np.uint32)
    wide.tofile(tmp_path / "tok.bin")
    write_token_sidecar(tmp_path / "tok.bin", np.uint32)
    raw = TokenSource(tmp_path / "tok.bin", **KW, shuffle=False)
    got = raw.read(0, np.arange(raw.samples_per_epoch))
    assert got["x"].dtype == np.uint32 and (got["x"] == windows(wide)[:, :L]).all()


def _run(make: Any, world: int, steps: int | None, state: Any = None, **kw: Any) -> Any:
    """The global batches of ``world`` hosts (their slices joined) and host 0's state."""
    per_host, states = [], []
    for rank in range(world):
        with Loader(make(), rank=rank, world_size=world, steps=steps, **kw) as loader:
            if state is not None:
                loader.load_state_dict(state)
            per_host.append([{k: np.array(v) for k, v in b.items()} for b in loader])
            states.append(loader.state_dict())
    assert all(s == states[0] for s in states)
    joined = [
        {k: np.concatenate([h[t][k] for h in per_host]) for k in per_host[0][t]}
        for t in range(len(per_host[0]))
    ]
    return joined, states[0]


def test_a_mixture_saved_on_4_hosts_resumes_on_2_with_the_same_global_batches(
    corpus: dict[str, Any],
) -> None:
    def mix() -> Mixture:
        code = TokenSource(corpus["code"], **KW)
        return Mixture(
            {"web": _web(corpus["root"]), "code": code}, {"web": 0.7, "code": 0.3}, batch_size=16
        )

    whole, _ = _run(mix, 1, 20, batch_size=16, seed=7)
    first, state = _run(mix, 4, 8, batch_size=16, seed=7)
    rest, _ = _run(mix, 2, 20, state, batch_size=16, seed=0)  # the state's seed is kept
    assert len(first) + len(rest) == 20
    for a, b in zip(whole, first + rest, strict=True):
        assert (a["x"] == b["x"]).all() and (a["source"] == b["source"]).all()
    counts = np.bincount(np.concatenate([b["source"] for b in whole]))
    assert counts.tolist() == [224, 96]  # 0.7 / 0.3 of 320 samples


@pytest.mark.parametrize("world", [1, 3])
def test_an_exact_pass_over_val_bin_sees_every_sample_once(
    corpus: dict[str, Any], world: int
) -> None:
    path = corpus["root"] / "nanogpt" / "val.bin"
    seen, rows = [], []
    for rank in range(world):
        val = TokenSource(path, context=L, shuffle=False)
        with Loader(val, batch_size=12, epochs=1, rank=rank, world_size=world) as loader:
            for batch in loader:
                seen.append(batch["sample"][batch["valid"]])
                rows.append(batch["x"][batch["valid"]])
    samples = np.concatenate(seen)
    ref = windows(corpus["val"])
    assert sorted(samples.tolist()) == list(range(len(ref)))
    assert (np.concatenate(rows)[np.argsort(samples)] == ref[:, :L]).all()


def test_a_shard_deleted_mid_run_is_said_to_be_gone_not_a_typo(corpus: dict[str, Any]) -> None:
    """A local llm.c shard deleted while a run reads: said as a raw or Megatron file's is
    ("the token source opened it before"), not with a guess at another shard's name."""
    root = corpus["root"]
    for reads in ("populate", "pread"):
        src = _web(root, shuffle=False, reads=reads)
        src.read(0, np.arange(3))  # the first shard's
        gone = root / "fineweb_train_000002.bin"
        kept = gone.read_bytes()
        os.remove(gone)
        try:
            with pytest.raises(ObjectNotFoundError) as caught:
                src.read(0, np.arange(src.samples_per_epoch))
        finally:
            src.close()
            gone.write_bytes(kept)
        message = str(caught.value)
        assert str(gone) in message
        assert "the token source opened it before" in message, message
        assert "did you mean" not in message


def test_a_megatron_shard_whose_idx_is_missing_is_told_so_not_to_give_a_dtype(
    tmp_path: Path,
) -> None:
    """Megatron shards (``--data-path`` parts) where one ``.idx`` did not come along: the
    error named a dtype to give, and given one, the shard read as raw tokens beside the
    pairs (no documents, another fingerprint). It names the missing index instead."""
    rng = np.random.default_rng(3)
    for i in range(3):
        megatron_pair(tmp_path / f"part_{i}_text_document", documents(rng, 40))
    missing = tmp_path / "part_1_text_document.idx"
    os.remove(missing)
    with pytest.raises(DataError) as caught:
        TokenSource(str(tmp_path / "*.bin"), context=L)
    message = str(caught.value)
    assert str(missing) in message and "Megatron" in message, message
    assert "needs a dtype" not in message


def test_an_llmc_shard_with_a_damaged_header_is_told_so_not_to_give_a_dtype(
    corpus: dict[str, Any],
) -> None:
    """One shard of a modded-nanogpt set whose magic was overwritten: the others say what
    it should be; given the dtype asked for, its header would have been 512 token ids."""
    root = corpus["root"]
    damaged = root / "fineweb_train_000001.bin"
    raw = bytearray(damaged.read_bytes())
    raw[:4] = (20240521).to_bytes(4, "little")
    damaged.write_bytes(bytes(raw))
    with pytest.raises(DataError) as caught:
        _web(root)
    message = str(caught.value)
    assert str(damaged) in message and "llm.c" in message, message
    assert "needs a dtype" not in message
