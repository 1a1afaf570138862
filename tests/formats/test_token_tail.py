"""TokenSource(tail=True): one exact pass predicts every token of every file once.

Each token's value encodes where it lies, ``file * 10_000 + position``, so the
targets a pass predicts (``y`` where ``loss_mask``) name their (file, position)
by their bytes alone, and the check needs no help from the plan under test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError, DataError, StateError
from headrace.formats import TokenSource, write_megatron_index
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact

L = 16
PAD = 65_535
# window_bytes 8 KiB: 4,096 uint16 tokens, S = 255 starts a window; blocks of 2,048 tokens.
KW: dict[str, Any] = {"context": L, "window_bytes": 8192, "block_bytes": 4096}
SIZES = (  # the largest first: file * 10_000 + position stays below 65,535 (PAD)
    9000,  # two full windows and a partial one ending in a tail of 7
    1000,  # a tail of 7 targets in a partial window
    255 * L + 2,  # full windows, then a tail of 1 target: the tail is a window of its own
    L + 1,  # exactly one sample, no tail
    5 * L + 1,  # no tail
    5,  # shorter than one sample: the tail is the file
    2,  # one target
)


def write(d: Path, sizes: tuple[int, ...], megatron: bool = False) -> list[str]:
    paths = []
    for f, t in enumerate(sizes):
        path = d / f"f{f}.bin"
        (f * 10_000 + np.arange(t)).astype(np.uint16).tofile(path)
        if megatron:  # documents of up to 300 tokens: they play no part in the samples
            lengths = [300] * (t // 300) + ([t % 300] if t % 300 else [])
            write_megatron_index(d / f"f{f}.idx", np.uint16, lengths)
        paths.append(str(path))
    return paths


def predicted(batches: list[dict[str, np.ndarray]]) -> Counter[int]:
    """The targets of the valid rows where ``loss_mask``, each row checked on the way:
    its inputs are the tokens before its targets, its masked places padding."""
    out: Counter[int] = Counter()
    for b in batches:
        v = b["valid"]
        for x, y, m in zip(b["x"][v], b["y"][v], b["loss_mask"][v], strict=True):
            assert m[0]  # every sample predicts at least one token
            k = int(m.sum())
            assert m[:k].all() and not m[k:].any()  # the padding is at the end, if any
            xv, yv = x.astype(np.int64), y.astype(np.int64)
            np.testing.assert_array_equal(xv[:k] + 1, yv[:k])  # x is y one place before
            assert (yv[k:] == PAD).all() and (xv[k + 1 :] == PAD).all()
            if k < L:  # a tail: its input ends with the file's last token, y's last target
                assert xv[k] == yv[k - 1]
            out.update(yv[:k].tolist())
    return out


def every_target(sizes: tuple[int, ...]) -> Counter[int]:
    return Counter(f * 10_000 + p for f, t in enumerate(sizes) for p in range(1, t))


def source(paths: list[str], **kw: Any) -> TokenSource:
    kw.setdefault("dtype", np.uint16)
    return TokenSource(paths, shuffle=False, tail=True, pad_id=PAD, **KW, **kw)


@pytest.mark.parametrize("megatron", [False, True])
@pytest.mark.parametrize("reads", ["populate", "pread"])
def test_a_pass_predicts_every_token_once_on_any_host_count(
    tmp_path: Path, megatron: bool, reads: str
) -> None:
    paths = write(tmp_path, SIZES, megatron)
    kw: dict[str, Any] = {"reads": reads, "dtype": None if megatron else np.uint16}
    src = source(paths, **kw)
    assert [f.format for f in src.files] == ["megatron" if megatron else "raw"] * len(SIZES)
    tails = sum((t - 1) % L != 0 for t in SIZES)
    assert src.samples_per_epoch == sum((t - 1) // L for t in SIZES) + tails
    want = every_target(SIZES)
    assert sum(want.values()) == sum(t - 1 for t in SIZES)
    for b in (12, 60):  # multiples of every host count; neither divides the pass
        for world in (1, 2, 3, 4):
            got: list[dict[str, np.ndarray]] = []
            for rank in range(world):
                with Loader(
                    source(paths, **kw),
                    batch_size=b,
                    rank=rank,
                    world_size=world,
                    epochs=1,
                ) as loader:
                    got.extend({k: v.copy() for k, v in batch.items()} for batch in loader)
            assert predicted(got) == want, (b, world)
    src.close()


def test_no_tail_no_extra_sample(tmp_path: Path) -> None:
    """Files whose targets L divides give the samples they give without tail, all unmasked."""
    sizes = (L + 1, 3 * L + 1, 600 * L + 1)
    paths = write(tmp_path, sizes)
    plain_source = TokenSource(paths, shuffle=False, dtype=np.uint16, **KW)
    with closing(source(paths)) as src, closing(plain_source) as plain:
        n = plain.samples_per_epoch
        assert src.samples_per_epoch == n
        got, base = src.read(0, np.arange(n)), plain.read(0, np.arange(n))
        np.testing.assert_array_equal(got["x"], base["x"])
        np.testing.assert_array_equal(got["y"], base["y"])
        assert got["loss_mask"].all() and got["loss_mask"].shape == (n, L)
        assert "loss_mask" not in base


def test_read_directly_and_through_a_file_url_agree(tmp_path: Path) -> None:
    """The tail of a buffered window read by ranged GETs (file://) is the mapped one's."""
    pytest.importorskip("obstore")
    paths = write(tmp_path, SIZES)
    urls = [Path(p).as_uri() for p in paths]
    with closing(source(paths)) as local, closing(source(urls)) as remote:
        n = local.samples_per_epoch
        order = np.random.default_rng(0).permutation(n)  # tails read alone and in company
        for part in np.array_split(order, 7):
            a, b = local.read(0, part), remote.read(0, part)
            assert a.keys() == b.keys()
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])
        assert predicted([{**local.read(0, np.arange(n)), "valid": np.ones(n, bool)}]) == (
            every_target(SIZES)
        )


def test_resume_is_exact_and_state_names_the_option(tmp_path: Path) -> None:
    paths = write(tmp_path, SIZES)

    def make() -> Loader:
        return Loader(source(paths), batch_size=7, epochs=1)

    with make() as lo:
        steps = lo.steps
        assert steps is not None
    assert_resume_exact(make, steps=steps, resume_at=[0, 1, steps // 2, steps - 1, steps])
    full = [paths[2], paths[3]]  # files long enough to load without tail
    with Loader(source(full), batch_size=7, epochs=1) as lo:
        state = lo.state_dict()
    with Loader(TokenSource(full, shuffle=False, dtype=np.uint16, **KW), batch_size=7) as plain:
        with pytest.raises(StateError, match="tail"):
            plain.load_state_dict(state)


def test_fingerprint_changes_only_with_the_option(tmp_path: Path) -> None:
    paths = write(tmp_path, (1000,))
    with closing(TokenSource(paths, shuffle=False, dtype=np.uint16, **KW)) as plain:
        fp = plain.fingerprint()
    assert "tail" not in fp and "pad_id" not in fp
    with closing(TokenSource(paths, shuffle=False, tail=True, dtype=np.uint16, **KW)) as tail:
        assert tail.fingerprint() == {**fp, "tail": True, "pad_id": 0}
        x = tail.read(0, np.array([62]))["x"][0]  # tokens 992..999, then pad_id 0
        assert x.tolist() == [*range(992, 1000), *[0] * 8]


def test_vocab_check_passes_the_padding(tmp_path: Path) -> None:
    paths = write(tmp_path, (1000,))
    with closing(
        TokenSource(
            paths, shuffle=False, tail=True, pad_id=3, vocab_size=1000, dtype=np.uint16, **KW
        )
    ) as src:
        last = src.read(0, np.array([src.samples_per_epoch - 1]))
        assert last["y"][0].tolist() == [*range(993, 1000), *[3] * 9]


def test_tail_is_refused_where_it_cannot_be_exact(tmp_path: Path) -> None:
    paths = write(tmp_path, (1000, 1))
    one = paths[:1]
    K = {**KW, "dtype": np.uint16}
    cases: list[tuple[Callable[[], object], type[Exception], str]] = [
        (lambda: TokenSource(one, tail=True, **K), ConfigError, "shuffle=False"),
        (lambda: TokenSource(one, shuffle=False, tail=1, **K), ConfigError, "True or False"),
        (lambda: TokenSource(one, shuffle=False, pad_id=0, **K), ConfigError, "only for it"),
        (
            lambda: TokenSource(one, shuffle=False, tail=True, pad_id=True, **K),
            ConfigError,
            "integer",
        ),
        (
            lambda: TokenSource(one, shuffle=False, tail=True, pad_id=70_000, **K),
            ConfigError,
            "does not fit the token dtype uint16",
        ),
        (
            lambda: TokenSource(one, shuffle=False, tail=True, pad_id=-1, **K),
            ConfigError,
            "does not fit",
        ),
        (
            lambda: TokenSource(one, shuffle=False, tail=True, pad_id=50, vocab_size=50, **K),
            ConfigError,
            r"outside the vocabulary \[0, 50\)",
        ),
        (
            lambda: TokenSource(paths, shuffle=False, tail=True, **K),
            DataError,
            r"f1.bin: 1 token\(s\) holds no target",
        ),
    ]
    for make, exc, match in cases:
        with pytest.raises(exc, match=match):
            make()


def test_short_file_without_tail_says_how(tmp_path: Path) -> None:
    paths = write(tmp_path, (5,))
    with pytest.raises(DataError, match="tail=True pads shorter files"):
        TokenSource(paths, shuffle=False, dtype=np.uint16, **KW)


def test_address_order_and_worker_processes_predict_every_token_once(tmp_path: Path) -> None:
    """Hosts that each read one stretch of a window (host_order="address"), and a
    torch DataLoader's worker processes (the source pickled, tail and pad_id with it)."""
    paths = write(tmp_path, SIZES)
    want = every_target(SIZES)
    for world in (2, 4):
        got: list[dict[str, np.ndarray]] = []
        for rank in range(world):
            with Loader(
                source(paths),
                batch_size=12,
                rank=rank,
                world_size=world,
                epochs=1,
                host_order="address",
            ) as loader:
                got.extend({k: v.copy() for k, v in batch.items()} for batch in loader)
        assert predicted(got) == want, world
    pytest.importorskip("torch")
    from headrace.torch import HeadraceDataLoader, TorchDataset

    with HeadraceDataLoader(
        TorchDataset(source(paths), batch_size=12, epochs=1), num_workers=2
    ) as dl:
        batches = [{k: v.numpy().copy() for k, v in b.items()} for b in dl]
    assert predicted(batches) == want
