"""Orbax checkpoints: the loader's state beside jax params, restored in a new process."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is an optional extra (pip install jax jaxlib)")
ocp = pytest.importorskip(
    "orbax.checkpoint", reason="orbax is a test dependency (pip install orbax-checkpoint)"
)

from _adapter_data import write_tokens  # noqa: E402
from orbax_train import (  # noqa: E402
    SOURCES,
    digests,
    jax_loader,
    params_like,
    restore,
    save,
    setup,
    train,
    write_files,
)

from headrace.errors import StateError  # noqa: E402
from headrace.formats import TokenSource  # noqa: E402
from headrace.pipeline import Loader  # noqa: E402

HERE = Path(__file__).parent
N, K = 9, 4


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_tokens(tmp_path_factory.mktemp("orbax"))
    write_files(root)
    return root


def in_new_process(*args: object) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    done = subprocess.run(
        [sys.executable, str(HERE / "orbax_train.py"), *map(str, args)],
        env=env,
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


# Every source once and each way of saving twice: a process start costs ~2 s.
@pytest.mark.parametrize(
    ("source", "how"),
    list(zip(sorted(SOURCES), itertools.cycle(["composite", "tree"]))),
)
def test_a_state_saved_with_orbax_resumes_in_a_new_process(
    root: Path, tmp_path: Path, source: str, how: str
) -> None:
    with jax_loader(root, source, N) as ld:
        straight = digests(ld)
    with jax_loader(root, source, N) as ld:
        it = iter(ld)
        first = digests(next(it) for _ in range(K))
        save(how, tmp_path / "ckpt", K, params_like(), ld.state_dict())
        del it
    assert first == straight[:K]

    in_new_process("digests", root, source, how, tmp_path / "ckpt", N, tmp_path / "out.json")
    got = json.loads((tmp_path / "out.json").read_text())
    assert got["params"] is True
    assert got["d"] == straight[K:]


def test_the_state_as_it_is_fails_in_a_standard_pytree_and_array_state_does_not(
    root: Path, tmp_path: Path
) -> None:
    # What a user tries first: the state inside the params' pytree. StandardSave keeps
    # arrays and numbers only, so the state's strings go through array_state().
    with jax_loader(root, "tokens", N) as ld:
        state = ld.state_dict()
    with ocp.StandardCheckpointer() as ckptr, pytest.raises(ValueError, match="str"):
        ckptr.save(tmp_path / "raw", {"params": params_like(), "data": state})
    save("tree", tmp_path / "ckpt", 0, params_like(), state)
    with jax_loader(root, "tokens", N) as again:
        restore("tree", tmp_path / "ckpt", params_like(), again)
        assert again.state_dict() == state
    # a tree restored without a target (metadata only) comes back as NumPy arrays
    with ocp.StandardCheckpointer() as ckptr:
        raw = ckptr.restore(tmp_path / "ckpt" / "0")["data"]
    assert isinstance(raw["fingerprint"], np.ndarray)
    with jax_loader(root, "tokens", N) as again:
        again.load_state_dict(raw)
        assert again.state_dict() == state
    # another data set's state, restored the same way, is refused naming what differs
    with jax_loader(root, "padded-mixture", N) as other:
        with pytest.raises(StateError, match="what differs: "):
            other.load_state_dict(raw)


@pytest.mark.parametrize("source", ["padded-mixture", "tokens"])
def test_optimizer_replay_through_orbax_gives_identical_params(
    root: Path, tmp_path: Path, source: str
) -> None:
    tree, ld = setup(root, source)
    with ld:
        straight = train(tree, ld, N)["params"]

    tree, ld = setup(root, source)
    with ld:
        tree = train(tree, ld, K)
        save("composite", tmp_path / "ckpt", K, tree, ld.state_dict())
    in_new_process("replay", root, source, tmp_path / "ckpt", N, tmp_path / "final.npz")

    resumed = dict(np.load(tmp_path / "final.npz"))
    assert resumed.keys() == straight.keys()
    for name, value in straight.items():
        assert np.array_equal(np.asarray(value), resumed[name]), name
    # the run learned something: the replay compares trained weights, not the start
    assert not np.array_equal(np.asarray(straight["emb"]), np.asarray(params_like()["emb"]))


def test_a_tree_restored_onto_data_that_changed_is_refused_naming_the_file(
    tmp_path: Path,
) -> None:
    # The fresh loader's array_state is the restore target: its keys must be the saved
    # ones whatever files changed (with a key a named file, orbax refused a file added,
    # a ValueError, before headrace could say what changed), and the part naming the
    # files, whose length changed, restores at its saved length.
    def tokens() -> Loader:
        source = TokenSource(sorted(tmp_path.glob("*.bin")), dtype="uint32", context=16)
        return Loader(source, batch_size=8, seed=1)

    for name in ("a.bin", "b.bin"):
        (np.arange(5000, dtype=np.uint32) % 1000).tofile(tmp_path / name)
    with tokens() as ld:
        save("tree", tmp_path / "ckpt", 0, params_like(), ld.state_dict())
    (np.arange(25_000, dtype=np.uint32) % 1000).tofile(tmp_path / "b.bin")
    (np.arange(5000, dtype=np.uint32) % 1000).tofile(tmp_path / "c.bin")
    with tokens() as other, pytest.raises(StateError) as info:
        restore("tree", tmp_path / "ckpt", params_like(), other)
    assert "b.bin: 20,000 bytes when the state was saved, 100,000 bytes now" in str(info.value)
    assert "c.bin (20,000 bytes, uint32, format raw) is new" in str(info.value)
    # A folder of 37 files: more than a state names, so their counts.
    root = write_files(tmp_path)
    with jax_loader(tmp_path, "files", N) as ld:
        save("tree", tmp_path / "ckpt2", 0, params_like(), ld.state_dict())
    np.save(root / "037.npy", np.zeros((3, 5), dtype=np.float32))
    with jax_loader(tmp_path, "files", N) as other:
        with pytest.raises(StateError, match=r"saved on 37 files of 6,956 bytes, these sources "):
            restore("tree", tmp_path / "ckpt2", params_like(), other)
