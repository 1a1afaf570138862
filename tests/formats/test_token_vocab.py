"""``TokenSource(vocab_size=V)``: every token a batch holds (``x`` and ``y``) must be an
id in ``[0, V)``; one outside is refused naming the file, its token offset and value.

Megatron's int32 files (what a vocabulary past 65,536 needs) hold negative ids as
readily as large ones; an embedding lookup of either fails far from the data (a
device-side assert on a GPU) or, worse, reads another row.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError, DataError
from headrace.formats import PaddedRows, PairRows, TokenSource, write_megatron_index
from headrace.pipeline import Loader, Mixture
from headrace.testing import batch_digest

L = 16
VOCAB = 128_000


def megatron(path: Path, tokens: np.ndarray) -> Path:
    """A Megatron ``.bin``/``.idx`` pair of int32 ids, two documents."""
    tokens.astype(np.int32).tofile(path)
    half = len(tokens) // 2
    write_megatron_index(path.with_suffix(".idx"), np.int32, np.array([half, len(tokens) - half]))
    return path


def ids(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, n).astype(np.int32)


def test_ids_in_range_read_as_without_the_check(tmp_path: Path) -> None:
    path = megatron(tmp_path / "web.bin", ids(5_000))
    tokens = np.fromfile(path, dtype=np.int32)
    tokens[7] = VOCAB - 1  # the largest id allowed, and the smallest
    tokens[9] = 0
    tokens.tofile(path)
    digests = []
    for vocab in (None, VOCAB):
        with Loader(TokenSource(path, context=L, vocab_size=vocab), batch_size=8, steps=30) as ld:
            digests.append(batch_digest(ld))
    assert digests[0] == digests[1]


@pytest.mark.parametrize(("offset", "value"), [(40, -3), (40, VOCAB), (L, VOCAB + 7)])
def test_an_id_outside_the_vocabulary_is_refused_naming_file_offset_and_value(
    tmp_path: Path, offset: int, value: int
) -> None:
    tokens = ids(4_000)
    tokens[offset] = value
    path = megatron(tmp_path / "code.bin", tokens)
    # Unshuffled, sample n starts at n * L: sample 0 holds offset L only as y's last token.
    src = TokenSource(path, context=L, shuffle=False, vocab_size=VOCAB)
    clean = src.read(0, np.arange(offset // L + 1, offset // L + 4))
    assert clean["x"].max() < VOCAB
    with pytest.raises(DataError) as info:
        src.read(0, np.arange(0, 8))
    msg = str(info.value)
    assert str(path) in msg
    assert f"token offset {offset}" in msg
    assert f"id {value}" in msg
    assert f"[0, {VOCAB})" in msg
    # Without vocab_size nothing is checked: the id comes through as it is in the file.
    plain = TokenSource(path, context=L, shuffle=False)
    assert value in plain.read(0, np.arange(0, 8))["y"]
    src.close()
    plain.close()


def test_a_negative_id_is_refused_under_a_vocab_past_the_signed_range(tmp_path: Path) -> None:
    # Read as unsigned, -3 is 2**32 - 3: below a vocab_size of 2**33 it must still be seen.
    tokens = ids(1_000)
    tokens[5] = -3
    src = TokenSource(megatron(tmp_path / "w.bin", tokens), context=L, vocab_size=2**33)
    with pytest.raises(DataError, match=r"token offset 5 .*: token id -3 is outside"):
        src.read(0, np.arange(src.samples_per_epoch))
    src.close()


def test_in_a_mixture_the_error_names_the_source_and_its_file(tmp_path: Path) -> None:
    web = megatron(tmp_path / "web.bin", ids(20_000))
    bad = ids(2_000, seed=1)
    bad[100:110] = -1
    math = megatron(tmp_path / "math.bin", bad)
    mix = Mixture(
        {
            "web": TokenSource(web, context=L, vocab_size=VOCAB),
            "math": TokenSource(math, context=L, vocab_size=VOCAB),
        },
        [0.5, 0.5],
        batch_size=8,
    )
    with (
        Loader(mix, batch_size=8, steps=40) as ld,
        pytest.raises(DataError, match=r"math\.bin: .*id -1") as info,
    ):
        for _ in ld:
            pass
    assert "source 'math'" in "\n".join(getattr(info.value, "__notes__", []))


def test_vocab_size_travels_to_worker_copies(tmp_path: Path) -> None:
    tokens = ids(2_000)
    tokens[3] = VOCAB
    path = megatron(tmp_path / "books.bin", tokens)
    copy = pickle.loads(pickle.dumps(TokenSource(path, context=L, shuffle=False, vocab_size=VOCAB)))
    assert copy.vocab_size == VOCAB
    with pytest.raises(DataError, match="token offset 3"):
        copy.read(0, np.arange(2))
    assert TokenSource(path, context=L).vocab_size is None


@pytest.mark.parametrize("vocab", [0, -5, True, 2.5, "128000"])
def test_a_vocab_size_that_is_no_positive_integer_is_refused(tmp_path: Path, vocab: object) -> None:
    path = megatron(tmp_path / "web.bin", ids(1_000))
    with pytest.raises(ConfigError, match="vocab_size must be a positive integer"):
        TokenSource(path, context=L, vocab_size=vocab)  # type: ignore[arg-type]


def test_vocab_size_is_no_part_of_the_fingerprint(tmp_path: Path) -> None:
    # It refuses batches, never changes them: a run saved before it was set resumes.
    path = megatron(tmp_path / "web.bin", ids(1_000))
    a = TokenSource(path, context=L).fingerprint()
    assert a == TokenSource(path, context=L, vocab_size=VOCAB).fingerprint()


def test_a_vocab_past_what_uint16_holds_is_refused_for_uint16_files(tmp_path: Path) -> None:
    # nanoGPT's prepare scripts cast ids to uint16: with Llama 3's 128,256 ids, every id
    # past 65,535 was stored wrapped around, as another id that passes any range check.
    wrapped = (ids(5_000) % 128_256).astype(np.uint16)
    wrapped.tofile(tmp_path / "train.bin")
    with pytest.raises(
        ConfigError, match=r"train\.bin: vocab_size=128256, but the tokens are stored as uint16"
    ):
        TokenSource(tmp_path / "train.bin", context=L, vocab_size=128_256)
    rows = tmp_path / "rows.npy"
    np.save(rows, wrapped[: 50 * (L + 1)].reshape(50, L + 1))
    with pytest.raises(ConfigError, match=r"rows\.npy: vocab_size=100277, .* Write the tokens"):
        PaddedRows(rows, context=L, vocab_size=100_277)
    with pytest.raises(ConfigError, match=r"rows\.npy: vocab_size=100277, .* Write the tokens"):
        PairRows({"anchor": rows}, vocab_size=100_277)
    # Up to 65,536 ids fit; 32-bit files hold any tokenizer's.
    assert TokenSource(tmp_path / "train.bin", context=L, vocab_size=65_536).vocab_size == 65_536
    assert TokenSource(megatron(tmp_path / "w.bin", ids(1_000)), context=L, vocab_size=2**40)
