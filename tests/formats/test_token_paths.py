"""TokenSource reads a folder and a glob pattern as the sorted list of the shards they name.

Real shards on disk: raw ``.bin`` files with ``.json`` sidecars and a Megatron
``.bin``/``.idx`` pair, beside a hidden file, a README and a subfolder. The folder and
the patterns give the fingerprint and the batches (digest) of the explicit sorted
list; sidecars and indexes are never read as shards; a FIFO, a socket or a dangling
link among the matches is refused by name, and so is a folder or pattern that names
no shard.
"""

from __future__ import annotations

import glob
import os
import socket
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError, ObjectNotFoundError
from headrace.formats import TokenSource, write_megatron_index, write_token_sidecar
from headrace.pipeline import Loader
from headrace.testing import batch_digest

KW = {"context": 16, "window_bytes": 4096, "block_bytes": 4096}


def _shards(root: Path) -> list[str]:
    """Five raw uint16 shards with sidecars and a Megatron pair under ``root``, and the
    things a folder of shards also holds; the shards' paths, sorted."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(5):
        t = np.random.default_rng(i).integers(0, 60_000, 900 + 71 * i).astype(np.uint16)
        t.tofile(root / f"s{i:02d}.bin")
        write_token_sidecar(root / f"s{i:02d}.bin", "uint16", tokens=t.size)
    m = np.random.default_rng(9).integers(0, 60_000, 1500).astype(np.uint16)
    m.tofile(root / "m.bin")
    write_megatron_index(root / "m.idx", np.uint16, np.array([700, 800]))
    np.arange(100, dtype=np.uint16).tofile(root / ".hidden.bin")  # too short: never read
    (root / "README.md").write_text("# shards of the corpus\n")
    (root / "sub").mkdir()
    np.arange(2000, dtype=np.uint16).tofile(root / "sub" / "deep.bin")
    write_token_sidecar(root / "sub" / "deep.bin", "uint16")
    (root / "dir.bin").mkdir()  # a folder named like a shard is not one
    return sorted(p for p in glob.glob(os.path.join(root, "*.bin")) if os.path.isfile(p))


def _digest(src: TokenSource) -> str:
    with Loader(src, batch_size=8, seed=3, steps=20, prefetch=0) as loader:
        return batch_digest(loader)


def test_folder_and_patterns_read_as_the_sorted_list(tmp_path: Path) -> None:
    explicit = _shards(tmp_path / "data")
    names = ["m.bin"] + [f"s{i:02d}.bin" for i in range(5)]
    assert [os.path.basename(p) for p in explicit] == names
    want = TokenSource(explicit, **KW)
    digest = _digest(want)
    # A folder (str or Path), a pattern that matches sidecars and indexes too, one
    # given inside a list: each the same source as the list, batch for batch.
    for given in (
        str(tmp_path / "data"),
        tmp_path / "data",
        str(tmp_path / "data" / "[ms]*"),  # matches m.idx and s00.bin.json ...: left out
        [str(tmp_path / "data" / "*.bin")],
    ):
        src = TokenSource(given, **KW)  # type: ignore[arg-type]
        assert [f.path for f in src.files] == explicit, given
        assert [f.format for f in src.files] == [f.format for f in want.files]
        assert src.fingerprint() == want.fingerprint()
        assert _digest(src) == digest
    assert [f.format for f in want.files] == ["megatron"] + ["raw"] * 5  # m.idx found
    # A recursive pattern reaches the subfolder a folder does not, in sorted order.
    deep = TokenSource(str(tmp_path / "data" / "**" / "*.bin"), **KW)
    every = sorted([*explicit, str(tmp_path / "data" / "sub" / "deep.bin")])
    assert [f.path for f in deep.files] == every
    assert _digest(deep) == _digest(TokenSource(every, **KW))


def test_items_expand_in_place_and_repeats_are_refused(tmp_path: Path) -> None:
    a = _shards(tmp_path / "a")
    b = _shards(tmp_path / "b")
    src = TokenSource([tmp_path / "b", str(tmp_path / "a" / "s0[01].bin")], **KW)
    assert [f.path for f in src.files] == [*b, *a[1:3]]
    with pytest.raises(ConfigError, match="listed twice"):
        TokenSource([tmp_path / "a", str(tmp_path / "a" / "s00.bin")], **KW)


def test_a_file_whose_name_looks_like_a_pattern_is_a_file(tmp_path: Path) -> None:
    np.arange(5000, dtype=np.uint16).tofile(tmp_path / "t[1].bin")
    np.arange(3000, dtype=np.uint16).tofile(tmp_path / "t1.bin")
    src = TokenSource(str(tmp_path / "t[1].bin"), dtype="uint16", **KW)
    assert [f.num_tokens for f in src.files] == [5000]


def test_fifo_socket_and_dangling_link_are_refused_by_name(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _shards(data)
    fifo = data / "s99.bin"
    os.mkfifo(fifo)
    # Opening the FIFO to read it would wait for a writer for ever.
    for given in (data, str(data / "s*.bin")):
        with pytest.raises(ConfigError, match=rf"^{fifo}: a FIFO, not a regular file"):
            TokenSource(given, **KW)  # type: ignore[arg-type]
    fifo.unlink()
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(data / "s98.bin"))
        with pytest.raises(ConfigError, match=r"s98\.bin: a socket, not a regular file"):
            TokenSource(data, **KW)
    finally:
        sock.close()
        (data / "s98.bin").unlink()
    (data / "s97.bin").symlink_to(tmp_path / "gone.bin")
    with pytest.raises(ObjectNotFoundError, match=r"s97\.bin: a symbolic link to .*gone\.bin"):
        TokenSource(str(data / "*.bin"), **KW)


def test_a_folder_or_pattern_of_no_shards_is_refused_naming_it(tmp_path: Path) -> None:
    text = tmp_path / "text"
    text.mkdir()
    (text / "a.jsonl").write_text('{"text": "hi"}\n')
    (text / "b.jsonl").write_text('{"text": "ho"}\n')
    (text / "deeper").mkdir()
    np.arange(3000, dtype=np.uint16).tofile(text / "deeper" / "x.bin")
    with pytest.raises(ObjectNotFoundError, match=r"no \.bin token files right in it") as info:
        TokenSource(text, dtype="uint16", **KW)
    msg = str(info.value)
    assert msg.startswith(f"{text}: ") and "(it holds 2 .jsonl)" in msg  # files, not folders
    assert repr(str(text / "**" / "*.bin")) in msg  # the pattern that reads deeper/x.bin
    assert len(TokenSource(str(text / "**" / "*.bin"), dtype="uint16", **KW).files) == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ObjectNotFoundError, match=r"right in it \(it is empty\)"):
        TokenSource(empty, dtype="uint16", **KW)
    # Sidecars alone are no shards.
    write_token_sidecar(empty / "x.bin", "uint16", tokens=10)
    pattern = str(empty / "x*")
    with pytest.raises(ObjectNotFoundError, match=r"x\*: no token files match this glob"):
        TokenSource(pattern, dtype="uint16", **KW)


def test_a_folder_of_several_splits_is_refused_naming_a_glob_for_one(tmp_path: Path) -> None:
    # nanoGPT's prepare.py writes train.bin and val.bin side by side; modded-nanogpt's
    # fineweb10B folder holds fineweb_train_000001.bin ... beside fineweb_val_000000.bin.
    # Read as one source, a run would train on its validation split without a word.
    for folder, names in (
        ("owt", ["train.bin", "val.bin"]),
        ("fineweb10B", ["fineweb_train_000001.bin", "fineweb_train_000002.bin",
                        "fineweb_val_000000.bin"]),
    ):  # fmt: skip
        root = tmp_path / folder
        root.mkdir()
        for i, name in enumerate(names):
            np.arange(3000 + i, dtype=np.uint16).tofile(root / name)
        with pytest.raises(ConfigError, match=r"several splits \(train: ") as info:
            TokenSource(root, dtype="uint16", **KW)
        msg = str(info.value)
        assert msg.startswith(f"{root}: ") and "validation: " in msg
        train = str(root / "*train*.bin")
        assert repr(train) in msg
        # The glob it names reads the training split alone; a glob is taken as given.
        src = TokenSource(train, dtype="uint16", **KW)
        assert [os.path.basename(f.path) for f in src.files] == [n for n in names if "train" in n]
        assert len(TokenSource(str(root / "*.bin"), dtype="uint16", **KW).files) == len(names)


def test_a_set_of_shards_is_refused(tmp_path: Path) -> None:
    # A set was read in its iteration order, which string hashing changes between
    # processes: the windows, the batches and the state's fingerprint with it.
    paths = _shards(tmp_path / "d")[:2]
    for files in (set(paths), frozenset(paths)):
        with pytest.raises(ConfigError, match=r"files must be a list, e\.g\. files=\[.*not a set"):
            TokenSource(files, **KW)  # type: ignore[arg-type]
    assert TokenSource(sorted(paths), **KW).samples_per_epoch > 0  # the list it names reads


def test_slow_opens_go_to_threads_in_order_and_quick_ones_stay_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a network mount each shard's open is a few round trips (~3 ms at 1 ms each):
    # one after another, 500 shards took 1.7 s there, side by side 0.5 s. On a local
    # disk (~40 us an open) threads only cost: they stay one after another.
    import threading
    import time

    from headrace.formats import _token_checks

    paths = []
    for i in range(40):
        paths.append(tmp_path / f"s{i:02d}.bin")
        np.arange(100 + i, dtype=np.uint16).tofile(paths[-1])
    real = _token_checks.open_token_file
    threads: set[int] = set()
    delay = {"s": 0.0}

    def timed(path: object, *args: object, **kwargs: object) -> object:
        threads.add(threading.get_ident())
        time.sleep(delay["s"])
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_token_checks, "open_token_file", timed)
    monkeypatch.setattr(_token_checks, "_SLOW_OPEN_S", 0.01)  # a loaded machine's hiccup: no
    quick = TokenSource(paths, dtype="uint16", context=8)
    assert threads == {threading.get_ident()}
    delay["s"] = 0.02
    slow = TokenSource(paths, dtype="uint16", context=8)
    assert len(threads) > 2
    assert [f.num_tokens for f in slow.files] == [f.num_tokens for f in quick.files]
    assert [f.num_tokens for f in slow.files] == list(range(100, 140))
    assert slow.fingerprint() == quick.fingerprint()
    quick.close()
    slow.close()
