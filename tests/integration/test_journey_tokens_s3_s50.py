"""A pre-training engineer's token shards on S3 (moto, some reads through the latency
proxy): modded-nanogpt shards under a prefix mixed 0.7 / 0.3 with a Megatron pair, read
as their local copies are, even when the proxy cuts bodies short; an exact validation
pass on 3 hosts; shards that went missing or were damaged, named as such."""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import DataError, ObjectNotFoundError, StorageError
from headrace.formats import TokenSource
from headrace.pipeline import Loader, Mixture
from headrace.testing import update_digest

pytestmark = pytest.mark.integration

L = 16
KW: dict[str, Any] = {"context": L, "window_bytes": 8 << 10, "block_bytes": 4096}
PREFIX = "journey50"


# As tests/formats/test_journey_tokens_s50.py writes them (a test module is no library).
def llmc_shard(path: Path, tokens: np.ndarray) -> None:
    header = np.zeros(256, dtype=np.int32)
    header[:3] = 20240520, 1, len(tokens)
    path.write_bytes(header.tobytes() + tokens.astype(np.uint16).tobytes())


def megatron_pair(prefix: Path, documents: list[list[np.ndarray]]) -> None:
    """``prefix.bin``/``.idx`` of uint16 ids as Megatron-LM's ``IndexedDatasetBuilder``
    writes them: one ``add_item`` a sequence, ``end_document`` after each document."""
    lengths: list[int] = []
    doc_idx = [0]
    with open(f"{prefix}.bin", "wb") as f:
        for doc in documents:
            for seq in doc:
                f.write(seq.astype(np.uint16).tobytes())
                lengths.append(len(seq))
            doc_idx.append(len(lengths))
    lens = np.array(lengths, dtype=np.int32)
    pointers = (np.cumsum(lens, dtype=np.int64) - lens) * 2
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(lens), len(doc_idx)))
        f.write(lens.tobytes() + pointers.tobytes() + np.array(doc_idx, np.int64).tobytes())


def documents(rng: np.random.Generator, n: int) -> list[list[np.ndarray]]:
    """``n`` documents of 1-3 sequences, the last ending in the EOD id 0."""
    out = []
    for _ in range(n):
        seqs = [rng.integers(1, 1000, int(rng.integers(3, 40))) for _ in range(rng.integers(1, 4))]
        seqs[-1] = np.append(seqs[-1], 0)
        out.append(seqs)
    return out


def windows(tokens: np.ndarray) -> np.ndarray:
    n = (len(tokens) - 1) // L
    return np.lib.stride_tricks.sliding_window_view(tokens, L + 1)[::L][:n]


def _upload(s3: S3Fixture, root: Path, prefix: str) -> None:
    client = s3.server.info.boto3_client()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        key = f"{prefix}/{path.relative_to(root).as_posix()}"
        client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())


@pytest.fixture(scope="module")
def corpus(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("journey")
    rng = np.random.default_rng(50)
    (root / "web").mkdir()
    (root / "code").mkdir()
    for i in range(3):
        tokens = rng.integers(0, 50_257, 6_000 + 517 * i).astype(np.uint16)
        llmc_shard(root / "web" / f"fineweb_train_{i:06d}.bin", tokens)
    megatron_pair(root / "code" / "code_text_document", documents(rng, 300))
    val = rng.integers(0, 50_257, 5_003).astype(np.uint16)
    val.tofile(root / "val.bin")
    _upload(s3, root, PREFIX)
    return {"root": root, "val": val}


def _mix(web: TokenSource, code: TokenSource) -> Mixture:
    return Mixture({"web": web, "code": code}, {"web": 0.7, "code": 0.3}, batch_size=8)


def _digest(mix: Mixture) -> str:
    h = hashlib.sha256()
    with Loader(mix, batch_size=8, seed=2, steps=120) as loader:
        for batch in loader:
            update_digest(h, batch)
    return h.hexdigest()


@pytest.mark.parametrize("kind", ["short", "truncate"])
def test_a_mixture_of_s3_shards_through_the_proxy_reads_as_the_local_copy(
    s3: S3Fixture, proxy: LatencyProxy, corpus: dict[str, Any], kind: str
) -> None:
    root = corpus["root"]
    local = _mix(
        TokenSource(str(root / "web" / "fineweb_train_*.bin"), **KW, positions="eos", eos_id=7),
        TokenSource(root / "code" / "code_text_document.bin", **KW, positions="documents"),
    )
    opts = options(s3, proxy.endpoint)
    base = f"s3://{BUCKET}/{PREFIX}"
    # Bodies cut short (a lying Content-Length, or a connection closed mid-body) on a
    # fifth of the GETs: retried, never read as tokens.
    proxy.set_faults([FaultRule(kind=kind, fraction=0.2, seed=1)])
    remote = _mix(
        TokenSource(f"{base}/web/", **KW, store_options=opts, positions="eos", eos_id=7),
        TokenSource(
            f"{base}/code/code_text_document.bin", **KW, store_options=opts, positions="documents"
        ),
    )
    assert _digest(remote) == _digest(local)
    assert proxy.stats.faults_by_kind.get(kind, 0) > 0


def test_an_exact_pass_over_val_bin_on_s3_on_3_hosts(s3: S3Fixture, corpus: dict[str, Any]) -> None:
    seen, rows = [], []
    for rank in range(3):
        val = TokenSource(
            f"s3://{BUCKET}/{PREFIX}/val.bin", **KW, shuffle=False, store_options=options(s3)
        )
        with Loader(val, batch_size=12, epochs=1, rank=rank, world_size=3) as loader:
            for batch in loader:
                seen.append(batch["sample"][batch["valid"]])
                rows.append(batch["x"][batch["valid"]])
    samples = np.concatenate(seen)
    ref = windows(corpus["val"])
    assert sorted(samples.tolist()) == list(range(len(ref)))
    assert (np.concatenate(rows)[np.argsort(samples)] == ref[:, :L]).all()


def test_a_shard_deleted_after_the_listing_is_named_at_its_read(
    s3: S3Fixture, corpus: dict[str, Any]
) -> None:
    _upload(s3, corpus["root"] / "web", f"{PREFIX}/gone")
    src = TokenSource(f"s3://{BUCKET}/{PREFIX}/gone/*.bin", **KW, store_options=options(s3))
    key = f"{PREFIX}/gone/fineweb_train_000001.bin"
    s3.server.info.boto3_client().delete_object(Bucket=BUCKET, Key=key)
    with pytest.raises(ObjectNotFoundError, match="deleted or moved while the run") as caught:
        with Loader(src, batch_size=8, seed=1, steps=200) as loader:
            for _ in loader:
                pass
    assert f"s3://{BUCKET}/{key}" in str(caught.value)


def test_a_megatron_pair_missing_its_idx_on_s3_is_named_not_asked_for_a_dtype(
    s3: S3Fixture, tmp_path: Path
) -> None:
    rng = np.random.default_rng(4)
    for i in range(3):
        megatron_pair(tmp_path / f"part_{i}_text_document", documents(rng, 40))
    os.remove(tmp_path / "part_1_text_document.idx")
    _upload(s3, tmp_path, f"{PREFIX}/noidx")
    base = f"s3://{BUCKET}/{PREFIX}/noidx"
    for files in (f"{base}/*.bin", f"{base}/"):
        with pytest.raises(DataError) as caught:
            TokenSource(files, **KW, store_options=options(s3))
        message = str(caught.value)
        assert f"{base}/part_1_text_document.idx" in message and "Megatron" in message, message


def test_documents_of_a_megatron_file_on_s3_without_options_say_which_to_give(
    s3: S3Fixture, corpus: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``src.files[0].documents()``, as docs/tokens.md offers it: the source's credentials
    are not the file's, so the bare call was refused with "no credentials found" (given to
    the source); it now says to pass the source's ``store_options``, which reads them."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    url = f"s3://{BUCKET}/{PREFIX}/code/code_text_document.bin"
    src = TokenSource(url, **KW, store_options=options(s3))
    with pytest.raises(StorageError) as caught:  # no credentials, here
        src.files[0].documents()
    assert "store_options=" in "\n".join(getattr(caught.value, "__notes__", [])), caught.value
    local = TokenSource(corpus["root"] / "code" / "code_text_document.bin", **KW)
    got = src.files[0].documents(store_options=options(s3))
    assert got.tolist() == local.files[0].documents().tolist()
