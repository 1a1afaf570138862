"""Checkpoint replay: model, optimizer and loader state saved together, resumed elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, SOURCES, token_source, write_tokens  # noqa: E402
from replay_train import resume, save, setup, train  # noqa: E402

from headrace.pipeline import Loader  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402

HERE = Path(__file__).parent
N, K = 12, 5

# jax (imported by test_jax.py in the same pytest process) warns at every fork;
# DataLoader workers fork, and never touch jax.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Any]]:
    """For each source, the weights after N steps in this process, and those of a new
    process that resumed (3 workers) from a checkpoint saved at step K (2 workers). One
    new process resumes every source: a start that imports torch costs seconds."""
    tmp = tmp_path_factory.mktemp("replay")
    root = write_tokens(tmp)
    straight, runs = {}, []
    for source in sorted(SOURCES):
        model, optim, dl = setup(root, source, workers=0)
        train(model, optim, dl, N)
        straight[source] = model.state_dict()

        model, optim, dl = setup(root, source, workers=2)
        train(model, optim, dl, K)
        assert dl.state_dict()["step"] == K
        save(tmp / f"{source}.pt", model, optim, dl)
        del model, optim, dl
        runs.append(f"{source}:{tmp / source}.pt:{tmp / source}-final.pt")

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    subprocess.run(
        [sys.executable, str(HERE / "replay_train.py"), str(root), str(N), "3", *runs],
        check=True,
        env=env,
        timeout=120,
    )
    return {s: (straight[s], torch.load(tmp / f"{s}-final.pt")) for s in straight}


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_optimizer_replay_in_a_new_process_gives_identical_weights(
    replayed: dict[str, tuple[Any, Any]], source: str
) -> None:
    straight, resumed = replayed[source]
    assert straight.keys() == resumed.keys()
    for name in straight:
        assert torch.equal(straight[name], resumed[name]), name


def test_resume_function_matches_in_process(tmp_path: Path) -> None:
    # The same path as the subprocess, in this process: a failure here is easier to read.
    root = write_tokens(tmp_path)
    model, optim, dl = setup(root, "tokens", workers=0)
    train(model, optim, dl, 6)
    save(tmp_path / "c.pt", model, optim, dl)
    train(model, optim, dl, 9)
    resume(root, "tokens", tmp_path / "c.pt", 9, 0, tmp_path / "f.pt")
    got = torch.load(tmp_path / "f.pt")
    assert all(torch.equal(v, got[k]) for k, v in model.state_dict().items())


def test_orbax_style_dict_checkpoint(tmp_path: Path) -> None:
    """A nested dict of arrays and ints with the loader state beside, split as orbax
    splits it (arrays by ``np.savez``, the state as JSON), for users of neither orbax
    nor torch.save; orbax itself: ``test_orbax.py``."""
    root = write_tokens(tmp_path)
    ld = Loader(token_source(root), batch_size=BATCH, seed=2, steps=10)
    params = {"w": np.zeros(4)}
    it = iter(ld)
    for _ in range(4):
        params["w"] += next(it)["x"][:, :4].sum(axis=0)
    ckpt = {"params": params, "step": 4, "data": ld.state_dict()}
    np.savez(tmp_path / "params.npz", **ckpt["params"])
    (tmp_path / "data.json").write_text(json.dumps({"step": ckpt["step"], "data": ckpt["data"]}))
    rest = batch_digest(it)
    ld.close()

    meta = json.loads((tmp_path / "data.json").read_text())
    restored = {"params": dict(np.load(tmp_path / "params.npz")), **meta}
    with Loader(token_source(root), batch_size=BATCH, seed=2, steps=10) as again:
        again.load_state_dict(restored["data"])
        assert restored["data"]["step"] == restored["step"] == 4
        assert batch_digest(again) == rest
    assert np.array_equal(restored["params"]["w"], params["w"])
