"""Orbax checkpoints: the loader's state beside jax params, restored in a new process."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def in_new_process(jobs: list[list[object]], folder: Path) -> None:
    """orbax_train.py's ``jobs``, in turn, in one new process."""
    (folder / "jobs.json").write_text(json.dumps([[str(a) for a in job] for job in jobs]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    done = subprocess.run(
        [sys.executable, str(HERE / "orbax_train.py"), str(folder / "jobs.json")],
        env=env,
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


# Every source once and each way of saving twice.
SAVED = list(zip(sorted(SOURCES), itertools.cycle(["composite", "tree"])))
REPLAYED = ["padded-mixture", "tokens"]


@pytest.fixture(scope="module")
def resumed(root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case's checkpoint, saved here, then restored in one new process that does
    them all (five processes took 3.2 s CPU each to start, importing jax and orbax; 2c,
    2026-12-04): by ``(source, how)``, the uninterrupted run's digests, the first K
    steps' and the resumed process's output; by ``source``, the uninterrupted run's
    params and the replayed ones' file."""
    folder = tmp_path_factory.mktemp("resumed")
    jobs: list[list[object]] = []
    found: dict[Any, Any] = {}
    for source, how in SAVED:
        ckpt, out = folder / f"{source}-{how}", folder / f"{source}-{how}.json"
        with jax_loader(root, source, N) as ld:
            straight = digests(ld)
        with jax_loader(root, source, N) as ld:
            it = iter(ld)
            first = digests(next(it) for _ in range(K))
            save(how, ckpt, K, params_like(), ld.state_dict())
            del it
        jobs.append(["digests", root, source, how, ckpt, N, out])
        found[source, how] = (straight, first, out)
    for source in REPLAYED:
        ckpt, out = folder / f"{source}-replay", folder / f"{source}-final.npz"
        tree, ld = setup(root, source)
        with ld:
            straight_params = train(tree, ld, N)["params"]
        tree, ld = setup(root, source)
        with ld:
            tree = train(tree, ld, K)
            save("composite", ckpt, K, tree, ld.state_dict())
        jobs.append(["replay", root, source, ckpt, N, out])
        found[source] = (straight_params, out)
    in_new_process(jobs, folder)
    return found


@pytest.mark.parametrize(("source", "how"), SAVED)
def test_a_state_saved_with_orbax_resumes_in_a_new_process(
    resumed: dict[Any, Any], source: str, how: str
) -> None:
    straight, first, out = resumed[source, how]
    assert first == straight[:K]
    got = json.loads(out.read_text())
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


@pytest.mark.parametrize("source", REPLAYED)
def test_optimizer_replay_through_orbax_gives_identical_params(
    resumed: dict[Any, Any], source: str
) -> None:
    straight, final = resumed[source]
    resumed_params = dict(np.load(final))
    assert resumed_params.keys() == straight.keys()
    for name, value in straight.items():
        assert np.array_equal(np.asarray(value), resumed_params[name]), name
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
