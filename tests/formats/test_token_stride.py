"""TokenSource(stride=S): a sliding-window pass counts every target once, with the context
Hugging Face's perplexity loop gives it.

Each token's value encodes where it lies, ``file * BASE + position``, so a row's ``x``
and ``y`` name the (file, position) of every target and of the context before it by
their bytes alone. The reference is HF's loop ("Perplexity of fixed-length models"),
run over each file's tokens as read back with ``np.fromfile``, its last window slid back
to end at the file's last token (as lm-eval's rolling windows do).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError, StateError
from headrace.formats import TokenSource, write_megatron_index
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact

L = 16
PAD = 65_535
BASE = {np.dtype(np.uint16): 10_000, np.dtype(np.uint32): 1_000_000}
# 8 KiB windows: 4,096 uint16 or 2,048 uint32 tokens; blocks of 4 KiB.
KW: dict[str, Any] = {"context": L, "window_bytes": 8192, "block_bytes": 4096}


def sizes_for(stride: int, dtype: np.dtype[Any]) -> tuple[int, ...]:
    """Files that give every case: several windows, tails of 1 and of stride - 1 targets,
    a file whose last window holds just its slid-back tail, one sample exactly, one whole
    sample and a tail, files shorter than one sample."""
    per_window = (8192 // dtype.itemsize - 1 - L) // stride + 1
    alone = (2 * per_window - 1) * stride + L + 1 + max(1, stride // 2)  # a window of its own
    return (
        alone if stride > 1 else 2 * per_window + L,
        3000,  # tail of 3000 - 17 targets past the grid, mod the stride
        5 * stride + L + 2,  # a tail of 1 target (stride > 1)
        L + 1,  # exactly one sample
        L + 2,  # one sample and a tail of 1, slid back by 1
        5,  # shorter than one sample: padded
        2,  # one target
    )


def write(d: Path, sizes: tuple[int, ...], dtype: Any, megatron: bool = False) -> list[str]:
    dt = np.dtype(dtype)
    paths = []
    for f, t in enumerate(sizes):
        path = d / f"f{f}.bin"
        (f * BASE[dt] + np.arange(t)).astype(dt).tofile(path)
        if megatron:  # documents of up to 300 tokens: they play no part in the samples
            lengths = [300] * (t // 300) + ([t % 300] if t % 300 else [])
            write_megatron_index(d / f"f{f}.idx", dt, lengths)
        paths.append(str(path))
    return paths


def reference(paths: list[str], dtype: Any, stride: int) -> tuple[dict[int, int], int]:
    """HF's loop over each file's tokens: {target token: tokens of context it is predicted
    from}, and the number of windows. ``max_length`` is ``L + 1`` (``L`` inputs and their
    ``L`` shifted labels); the last window begins ``L + 1`` before the file's end."""
    scored: dict[int, int] = {}
    windows = 0
    for path in paths:
        tokens = np.fromfile(path, dtype=dtype).tolist()
        n, prev_end, begin = len(tokens), 1, 0  # token 0 is nobody's target
        while True:
            end = min(begin + L + 1, n)
            begin = max(0, end - (L + 1))
            ids = tokens[begin:end]
            trg_len = end - prev_end  # the targets no window scored yet: the last trg_len
            for j in range(len(ids) - trg_len, len(ids)):
                assert ids[j] not in scored
                scored[ids[j]] = j  # ids[:j], the model's context for ids[j]
            windows += 1
            prev_end = end
            if end == n:
                break
            begin += stride
    return scored, windows


def counted(batches: list[dict[str, np.ndarray]]) -> tuple[dict[int, int], Counter[int]]:
    """The loader's answer: {target token: context} where ``valid & loss_mask``, and how
    often each target was counted. Each counted target's context is checked to be the
    tokens just before it in its file: ``x[: c + 1]`` for the target ``y[c]``."""
    scored: dict[int, int] = {}
    times: Counter[int] = Counter()
    for b in batches:
        v = b["valid"]
        for x, y, m in zip(b["x"][v], b["y"][v], b["loss_mask"][v], strict=True):
            xv, yv = x.astype(np.int64), y.astype(np.int64)
            for c in np.flatnonzero(m).tolist():
                target = int(yv[c])
                want = list(range(target - c - 1, target))  # the c + 1 tokens before it
                # Lists: np.testing's assert took most of this module's time (44k calls).
                assert xv[: c + 1].tolist() == want, (target, xv[: c + 1], want)
                scored[target] = c + 1
                times[target] += 1
            assert m.any()  # every sample counts a target
    return scored, times


def source(paths: list[str], stride: int, **kw: Any) -> TokenSource:
    return TokenSource(paths, shuffle=False, stride=stride, pad_id=PAD, **KW, **kw)


def one_pass(make: Callable[[], TokenSource], world: int, **kw: Any) -> list[dict]:
    got: list[dict[str, np.ndarray]] = []
    for rank in range(world):
        with Loader(make(), batch_size=12, rank=rank, world_size=world, epochs=1, **kw) as lo:
            got.extend({k: v.copy() for k, v in batch.items()} for batch in lo)
    return got


@pytest.mark.parametrize(
    ("dtype", "megatron"), [(np.uint16, False), (np.uint32, False), (np.uint16, True)]
)
@pytest.mark.parametrize("stride", [1, 5, L // 2, L])
def test_a_pass_counts_what_hf_counts_on_any_host_count(
    tmp_path: Path, dtype: Any, megatron: bool, stride: int
) -> None:
    paths = write(tmp_path, sizes_for(stride, np.dtype(dtype)), dtype, megatron)
    want, windows = reference(paths, dtype, stride)
    assert len(want) == sum(int(np.fromfile(p, dtype=dtype).size) - 1 for p in paths)
    kw: dict[str, Any] = {"dtype": None if megatron else dtype}
    with closing(source(paths, stride, **kw)) as src:
        assert [f.format for f in src.files] == ["megatron" if megatron else "raw"] * len(paths)
        assert src.samples_per_epoch == windows
        assert windows % 12  # the pass does not fill its last batch
        assert src.layout.num_windows > len(paths)  # several windows in a file
    for world in (1, 2, 3, 4):
        got, times = counted(one_pass(lambda: source(paths, stride, **kw), world))
        assert set(times.values()) == {1}, world  # none counted twice
        assert got == want, world  # the same targets, each with the same context


def test_each_target_sees_the_context_the_stride_allows(tmp_path: Path) -> None:
    """At stride S, a file's first L targets see 1..L tokens, every later one at least
    L - S + 1, and the tail's its whole L before it."""
    paths = write(tmp_path, (1000,), np.uint16)
    for stride in (1, 4, L):
        got, _ = counted(one_pass(lambda s=stride: source(paths, s, dtype=np.uint16), 1))
        assert [got[p] for p in range(1, L + 1)] == list(range(1, L + 1))
        later = [got[p] for p in range(L + 1, 1000)]
        assert min(later) == L - stride + 1 and max(later) == L
        assert got[999] == L  # the last target, in the tail slid back
    assert len(got) == 999


def test_stride_context_is_tail_with_the_tail_slid_back(tmp_path: Path) -> None:
    """stride=L gives tail=True's samples but the last: the same starts 0, L, 2L, ...;
    where tail=True pads the last, stride=L slides it back to end at the file's end."""
    paths = write(tmp_path, (1000, L + 1, 5), np.uint16)
    with (
        closing(TokenSource(paths, shuffle=False, tail=True, dtype=np.uint16, **KW)) as tail,
        closing(TokenSource(paths, shuffle=False, stride=L, dtype=np.uint16, **KW)) as strided,
    ):
        n = tail.samples_per_epoch
        assert strided.samples_per_epoch == n
        a, b = tail.read(0, np.arange(n)), strided.read(0, np.arange(n))
        last = (1000 - 1) // L  # the first file's tail: 7 targets
        same = np.arange(n) != last
        for k in ("x", "y", "loss_mask"):
            np.testing.assert_array_equal(a[k][same], b[k][same])
        assert b["x"][last].tolist() == list(range(1000 - 1 - L, 999))
        assert b["loss_mask"][last].tolist() == [False] * (L - 7) + [True] * 7


def test_no_tail_files_give_the_plain_windows_overlapped(tmp_path: Path) -> None:
    """Without a tail, stride S reads the windows 0, S, 2S, ...: sample k is
    ``t[kS : kS + L + 1]``, read directly as a plain source's rows."""
    paths = write(tmp_path, (8 * 4 + L + 1,), np.uint16)
    with closing(source(paths, 4, dtype=np.uint16)) as src:
        got = src.read(0, np.arange(src.samples_per_epoch))
        assert src.samples_per_epoch == 9
        tokens = np.fromfile(paths[0], dtype=np.uint16)
        rows = np.stack([tokens[4 * k : 4 * k + L + 1] for k in range(9)])
        np.testing.assert_array_equal(got["x"], rows[:, :-1])
        np.testing.assert_array_equal(got["y"], rows[:, 1:])
        assert got["loss_mask"][0].all() and got["loss_mask"][1:, : L - 4].sum() == 0
        assert got["loss_mask"][1:, L - 4 :].all()


def test_read_directly_and_through_a_file_url_agree(tmp_path: Path) -> None:
    """A file:// URL takes the object-store path (buffered windows, ranged GETs): the same
    rows, the slid-back tails included, read in any order and company."""
    pytest.importorskip("obstore")
    paths = write(tmp_path, sizes_for(5, np.dtype(np.uint32)), np.uint32)
    urls = [Path(p).as_uri() for p in paths]
    with (
        closing(source(paths, 5, dtype=np.uint32)) as local,
        closing(source(urls, 5, dtype=np.uint32)) as remote,
    ):
        n = local.samples_per_epoch
        order = np.random.default_rng(0).permutation(n)
        for part in np.array_split(order, 7):
            a, b = local.read(0, part), remote.read(0, part)
            assert a.keys() == b.keys() == {"x", "y", "loss_mask"}
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])
    want, _ = reference(paths, np.uint32, 5)
    for world in (1, 3):
        got, times = counted(one_pass(lambda: source(urls, 5, dtype=np.uint32), world))
        assert got == want and set(times.values()) == {1}


def test_address_order_and_worker_processes_count_every_target_once(tmp_path: Path) -> None:
    """Hosts that each read one stretch of a window (host_order="address"), and a torch
    DataLoader's worker processes (the source pickled, its stride with it)."""
    paths = write(tmp_path, sizes_for(8, np.dtype(np.uint16)), np.uint16)
    want, _ = reference(paths, np.uint16, 8)
    for world in (2, 4):
        got, _ = counted(
            one_pass(lambda: source(paths, 8, dtype=np.uint16), world, host_order="address")
        )
        assert got == want, world
    pytest.importorskip("torch")
    from headrace.torch import HeadraceDataLoader, TorchDataset

    with HeadraceDataLoader(
        TorchDataset(source(paths, 8, dtype=np.uint16), batch_size=12, epochs=1), num_workers=2
    ) as dl:
        batches = [{k: v.numpy().copy() for k, v in b.items()} for b in dl]
    got, times = counted(batches)
    assert got == want and set(times.values()) == {1}


def test_resume_is_exact_and_state_names_the_option(tmp_path: Path) -> None:
    paths = write(tmp_path, sizes_for(8, np.dtype(np.uint16)), np.uint16)

    def make() -> Loader:
        return Loader(source(paths, 8, dtype=np.uint16), batch_size=7, epochs=1)

    with make() as lo:
        steps = lo.steps
        assert steps is not None
    assert_resume_exact(make, steps=steps, resume_at=[0, 1, steps // 2, steps - 1, steps])
    with make() as lo:
        state = lo.state_dict()
    others = [
        TokenSource(paths, shuffle=False, tail=True, pad_id=PAD, dtype=np.uint16, **KW),
        source(paths, 4, dtype=np.uint16),
    ]
    for other in others:
        with Loader(other, batch_size=7, epochs=1) as lo, pytest.raises(StateError):
            lo.load_state_dict(state)


def test_fingerprint_names_the_stride_only_when_given(tmp_path: Path) -> None:
    paths = write(tmp_path, (1000,), np.uint16)
    with closing(TokenSource(paths, shuffle=False, tail=True, dtype=np.uint16, **KW)) as tail:
        fp = tail.fingerprint()
    assert "stride" not in fp
    with closing(TokenSource(paths, shuffle=False, stride=8, dtype=np.uint16, **KW)) as s:
        assert s.fingerprint() == {**fp, "stride": 8}  # tail=True implied, pad_id 0
        assert s.tail and "stride" in vars(s)
    with closing(TokenSource(paths, shuffle=False, dtype=np.uint16, **KW)) as plain:
        assert "stride" not in vars(plain)  # the class default: instance dicts stay small
        assert plain.stride is None and "stride" not in plain.fingerprint()


def test_stride_is_refused_where_it_cannot_count_each_target_once(tmp_path: Path) -> None:
    paths = write(tmp_path, (1000,), np.uint16)
    K = {**KW, "dtype": np.uint16}
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: TokenSource(paths, stride=8, **K), r"stride=8 .* needs shuffle=False"),
        (
            lambda: TokenSource(paths, shuffle=False, stride=0, **K),
            r"stride=0 is outside \[1, context=16\].* Give 1 <= stride <= 16",
        ),
        (
            lambda: TokenSource(paths, shuffle=False, stride=L + 1, **K),
            r"stride=17 is outside \[1, context=16\]",
        ),
        (  # accepted silently before: the stride counted the tail anyway
            lambda: TokenSource(paths, shuffle=False, stride=4, tail=False, **K),
            r"stride=4 counts every target .* implies tail=True \(got tail=False\)",
        ),
        (
            lambda: TokenSource(paths, shuffle=False, stride=True, **K),
            r"stride must be an integer in \[1, context=16\] \(got True\)",
        ),
        (
            lambda: TokenSource(paths, shuffle=False, stride="8", **K),
            r"stride must be an integer .*got '8'",
        ),
        (
            lambda: TokenSource(paths, shuffle=False, stride=4, pad_id=70_000, **K),
            "does not fit the token dtype uint16",
        ),
    ]
    for make, match in cases:
        with pytest.raises(ConfigError, match=match):
            make()
    with closing(TokenSource(paths, shuffle=False, stride=np.int64(4), **K)) as src:
        assert src.stride == 4 and type(src.stride) is int


def test_document_positions_follow_the_slid_back_tail(tmp_path: Path) -> None:
    """positions="documents" counts from each row's first token or the document start in
    it, the tail's slid-back row and the overlapping rows alike (documents of 300)."""
    paths = write(tmp_path, (1000, L + 2), np.uint16, megatron=True)
    with closing(TokenSource(paths, shuffle=False, stride=5, positions="documents", **KW)) as src:
        got = src.read(0, np.arange(src.samples_per_epoch))
        for x, pos in zip(got["x"].astype(np.int64), got["position_ids"], strict=True):
            p = x % 10_000  # each token's place in its file
            want = p - np.maximum(p[0], p // 300 * 300)
            np.testing.assert_array_equal(pos, want)
