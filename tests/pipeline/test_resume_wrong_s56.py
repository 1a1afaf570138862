"""A long run resumed with the wrong thing (s56): the refusal names what differs and a
way on that this loader can take."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import StateError
from headrace.formats import TokenSource
from headrace.pipeline import Loader, Mixture

L, B = 16, 12


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for i, name in enumerate(["web", "code"]):
        path = tmp_path / f"{name}.bin"
        (np.arange(5_000, dtype=np.uint32) + (i << 20)).tofile(path)
        out[name] = path
    return out


def test_a_mixtures_state_into_a_loader_of_one_of_its_sources_is_no_mixture_change(
    files: dict[str, Path],
) -> None:
    # The run was a mixture; the restart's config points at one of its sources alone.
    # The refusal advised a Mixture schedule giving every saved source a weight of 0
    # from the saved step ("to drop 'code', 'web' ... keep the sources as saved"),
    # which no Mixture takes and which this loader, not a mixture, could not follow.
    srcs = {n: TokenSource(p, context=L, dtype="uint32") for n, p in files.items()}
    with Loader(Mixture(srcs, [0.6, 0.4], batch_size=B), batch_size=B, seed=5, steps=9) as ld:
        for _ in zip(range(4), ld, strict=False):
            pass
        saved = ld.state_dict()
    with Loader(TokenSource(files["web"], context=L, dtype="uint32"), batch_size=B, seed=5) as one:
        with pytest.raises(StateError) as err:
            one.load_state_dict(saved)
    text = str(err.value)
    assert 'kind: "mixture" when the state was saved, "tokens" now' in text
    assert "schedule=" not in text and "to drop" not in text
    assert "step 4" in text  # the way on names the saved step
    # The reverse, one source's state into the mixture, advised adding every source.
    with Loader(TokenSource(files["web"], context=L, dtype="uint32"), batch_size=B, seed=5) as one:
        for _ in zip(range(4), one, strict=False):
            pass
        single = one.state_dict()
    with Loader(Mixture(srcs, [0.6, 0.4], batch_size=B), batch_size=B, seed=5) as ld:
        with pytest.raises(StateError) as err:
            ld.load_state_dict(single)
    assert "schedule=" not in str(err.value) and "to add" not in str(err.value)


def test_another_window_bytes_is_named_by_the_parameter_that_sets_it(
    files: dict[str, Path],
) -> None:
    # window_bytes reads like an I/O buffer size, but the shuffle goes window by window:
    # a restart that tuned it is refused, naming "window_tokens" (window_bytes over the
    # item size), a name no TokenSource parameter has; the saved run's window_bytes,
    # which resumes exactly, was nowhere.
    def loader(**kw: int) -> Loader:
        return Loader(TokenSource(files["web"], context=L, dtype="uint32", **kw), batch_size=B)

    with loader() as ld:
        for _ in zip(range(2), ld, strict=False):
            pass
        saved = ld.state_dict()
    with loader(window_bytes=1 << 20) as ld, pytest.raises(StateError) as err:
        ld.load_state_dict(saved)
    text = str(err.value)
    assert "window_tokens: 67108864 when the state was saved, 262144 now" in text
    assert "window_bytes" in text and "268,435,456" in text  # the default, for 4-byte tokens
    with loader(window_bytes=268_435_456) as ld:  # as the hint says: resumes exactly
        ld.load_state_dict(saved)
        assert ld.step == 2


def write_megatron(prefix: Path, rng: np.random.Generator) -> None:
    """A uint16 pair as Megatron-LM's IndexedDatasetBuilder writes it: the documents'
    tokens back to back, and an index (magic, version 1, dtype code 8, sequence and
    document counts, int32 lengths, int64 byte pointers, int64 document indices)."""
    docs = [rng.integers(1, 50_000, int(rng.integers(1, 200)), dtype=np.uint16) for _ in range(40)]
    Path(f"{prefix}.bin").write_bytes(b"".join(d.tobytes() for d in docs))
    lens = np.array([len(d) for d in docs], np.int32)
    ptrs = np.concatenate([[0], np.cumsum(lens[:-1].astype(np.int64) * 2)]).astype(np.int64)
    head = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(lens), len(lens) + 1)
    index = np.arange(len(lens) + 1, dtype=np.int64)
    Path(f"{prefix}.idx").write_bytes(head + lens.tobytes() + ptrs.tobytes() + index.tobytes())


def test_a_megatron_bin_resumed_without_its_idx_goes_on_exactly(tmp_path: Path) -> None:
    # The job moved to another cluster and the copy left the .idx files behind: the
    # .bin then needs dtype=, and is described as raw. Its tokens, and every batch,
    # are the saved run's; the refusal said the source would go on "in its new data's
    # order (the epoch in progress is shuffled anew, so some of its samples repeat and
    # some are skipped)", and its way on did so, where the saved state resumes exactly.
    rng = np.random.default_rng(56)
    old, new = tmp_path / "old", tmp_path / "new"
    for root in (old, new):
        root.mkdir()
    rng.integers(0, 50_257, 6_000, dtype=np.uint16).tofile(old / "train.bin")  # nanoGPT
    write_megatron(old / "code_text_document", rng)
    for name in ("train.bin", "code_text_document.bin"):  # the copy, without the .idx
        (new / name).write_bytes((old / name).read_bytes())

    def loader(root: Path, **code: str) -> Loader:
        web = TokenSource(root / "train.bin", context=L)
        meg = TokenSource(root / "code_text_document.bin", context=L, **code)
        return Loader(Mixture({"web": web, "code": meg}, [0.6, 0.4], batch_size=B), **RUN)

    with loader(old) as ld:
        straight = [b["x"].tobytes() for b in ld]
    with loader(old) as ld:
        saved = next(ld.state_dict() for i, _ in enumerate(ld) if i == 2)
    assert saved["step"] == 3
    with loader(new, dtype="uint16") as ld:
        with pytest.raises(StateError) as err:
            ld.load_state_dict(saved)
        text = str(err.value)
        assert "format megatron when the state was saved, format raw now" in text
        assert "shuffled anew" not in text and ".idx" in text
        assert "go on exactly at step 3" in text
        own = ld.state_dict()  # the way on the refusal gives
        ld.load_state_dict({**saved, "fingerprint": own["fingerprint"], "parts": own["parts"]})
        assert [b["x"].tobytes() for b in ld] == straight[3:]


RUN = {"batch_size": B, "seed": 5, "steps": 14}
