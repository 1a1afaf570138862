"""TokenSource(stride=S) beside the rest of an evaluation pipeline: a Mixture of validation
sets, host_order="address", a state saved on another host count, files shorter than a
sample, vocab_size= and pad_id= at the edges, int32 Megatron files.

Each token's value is ``base + position`` in its file, so the targets a pass scores
(``y`` where ``valid[:, None] & loss_mask``) name themselves: every token but each file's
first must be scored exactly once, on any host count."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError, DataError, FormatError
from headrace.formats import TokenSource, write_megatron_index
from headrace.pipeline import Loader, Mixture

L = 16
KW: dict[str, Any] = {"context": L, "shuffle": False, "window_bytes": 8192, "block_bytes": 4096}


def write(d: Path, sizes: list[int], dtype: Any = np.uint16, base: int = 1000) -> list[str]:
    paths = []
    for f, n in enumerate(sizes):
        path = d / f"f{f}.bin"
        (f * base + np.arange(n)).astype(dtype).tofile(path)
        paths.append(str(path))
    return paths


def expected(sizes: list[int], base: int = 1000) -> Counter[int]:
    return Counter(f * base + t for f, n in enumerate(sizes) for t in range(1, n))


def scored(make: Any, world: int = 1, **kw: Any) -> Counter[int]:
    out: Counter[int] = Counter()
    for rank in range(world):
        with Loader(make(), batch_size=8, epochs=1, rank=rank, world_size=world, **kw) as ld:
            for b in ld:
                out.update(b["y"][b["valid"][:, None] & b["loss_mask"]].tolist())
    return out


@pytest.mark.parametrize("host_order", ["plan", "address"])
@pytest.mark.parametrize("world", [1, 2, 4])
def test_every_target_once_on_any_host_count_and_host_order(
    tmp_path: Path, host_order: str, world: int
) -> None:
    sizes = [300, 100, 17, 5]
    paths = write(tmp_path, sizes)
    make = lambda: TokenSource(paths, dtype=np.uint16, stride=4, **KW)  # noqa: E731
    assert scored(make, world, host_order=host_order) == expected(sizes)


def test_a_mixture_of_validation_sets_scores_each_sets_targets_once(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = write(tmp_path / "a", [300, 40])
    b = write(tmp_path / "b", [100])  # ids 0..99, as a's first file: told apart by source
    sets = [
        TokenSource(a, dtype=np.uint16, stride=4, **KW),
        TokenSource(b, dtype=np.uint16, stride=L, **KW),  # another stride: L, slid tail
    ]
    got: dict[int, Counter[int]] = {0: Counter(), 1: Counter()}
    with Loader(Mixture(sets, [0.5, 0.5], batch_size=8), batch_size=8, epochs=1) as ld:
        for batch in ld:
            ok = batch["valid"][:, None] & batch["loss_mask"]
            for s in (0, 1):
                got[s].update(batch["y"][ok & (batch["source"] == s)[:, None]].tolist())
    assert got[0] == expected([300, 40])
    assert got[1] == expected([100])


def test_a_state_saved_on_two_hosts_resumes_on_four_mid_pass(tmp_path: Path) -> None:
    paths = write(tmp_path, [300, 100, 9])
    make = lambda: TokenSource(paths, dtype=np.uint16, stride=3, **KW)  # noqa: E731
    with Loader(make(), batch_size=8, epochs=1) as ld:
        straight = [b["y"].copy() for b in ld]
    with Loader(make(), batch_size=8, epochs=1, rank=1, world_size=2) as ld:
        it = iter(ld)
        for _ in range(5):
            next(it)
        state = ld.state_dict()
    parts = []
    for rank in range(4):
        with Loader(make(), batch_size=8, epochs=1, rank=rank, world_size=4) as ld:
            ld.load_state_dict(state)
            parts.append([b["y"].copy() for b in ld])
    resumed = [np.concatenate(step) for step in zip(*parts, strict=True)]
    assert len(resumed) == len(straight) - 5
    for got, want in zip(resumed, straight[5:], strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("stride", [1, 3, L])
def test_many_files_shorter_than_a_sample(tmp_path: Path, stride: int) -> None:
    sizes = [2 + i % 15 for i in range(40)]  # 2 to 16 tokens: none holds L + 1
    paths = write(tmp_path, sizes, base=100)
    make = lambda: TokenSource(paths, dtype=np.uint16, stride=stride, **KW)  # noqa: E731
    assert scored(make) == expected(sizes, base=100)
    assert make().samples_per_epoch == len(sizes)  # one short sample each


def test_a_file_of_one_token_is_refused_by_name(tmp_path: Path) -> None:
    paths = write(tmp_path, [300, 1])
    with pytest.raises(DataError, match=r"f1\.bin: 1 token\(s\) holds no target to predict"):
        TokenSource(paths, dtype=np.uint16, stride=1, **KW)


def test_vocab_and_pad_at_the_edges(tmp_path: Path) -> None:
    sizes = [300, 5]  # ids 0..299 and 1000..1004; the short file is padded
    paths = write(tmp_path, sizes)
    for pad in (0, 1004):  # the smallest id and V - 1
        src = lambda pad=pad: TokenSource(  # noqa: E731
            paths, dtype=np.uint16, stride=4, vocab_size=1005, pad_id=pad, **KW
        )
        assert scored(src) == expected(sizes)
    with pytest.raises(ConfigError, match=r"pad_id=1005 is outside the vocabulary \[0, 1005\)"):
        TokenSource(paths, dtype=np.uint16, stride=4, vocab_size=1005, pad_id=1005, **KW)
    src = TokenSource(paths, dtype=np.uint16, stride=4, vocab_size=1004, **KW)
    with pytest.raises(FormatError, match=r"f1\.bin: token offset 4 \(byte 8\).*token id 1004 "):
        src.read(0, np.arange(src.samples_per_epoch))


def test_int32_megatron_files(tmp_path: Path) -> None:
    sizes = [500, 20]
    paths = write(tmp_path, sizes, np.int32, base=70_000)
    for path, n in zip(paths, sizes, strict=True):
        write_megatron_index(Path(path).with_suffix(".idx"), np.int32, [n // 2, n - n // 2])
    make = lambda: TokenSource(paths, stride=5, positions="documents", **KW)  # noqa: E731
    assert scored(make) == expected(sizes, base=70_000)
    with pytest.raises(ConfigError, match=r"Megatron indexes hold .* tokens, not uint32"):
        write_megatron_index(tmp_path / "u.idx", np.uint32, [4])
