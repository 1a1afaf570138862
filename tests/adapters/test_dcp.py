"""torch.distributed.checkpoint (DCP): model, optimizer and loader in one checkpoint,
saved by 2 ranks (gloo, CPU, DDP), resumed by 2 ranks and by 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import write_tokens  # noqa: E402

HERE = Path(__file__).parent
STEPS, SAVE_AT = 10, 4


def torchrun(nproc: int, *args: object) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path]),
        "OMP_NUM_THREADS": "1",
    }
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += [f"--nproc_per_node={nproc}", str(HERE / "dcp_train.py"), *map(str, args)]
    done = subprocess.run(cmd, env=env, timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module", params=["padded-mixture/loader", "tokens/per-rank"])
def saved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Two ranks train to STEPS and save with DCP at SAVE_AT: ``loader`` keys the
    ``HeadraceDataLoader`` itself (a ``Stateful``), ``per-rank`` as torchtitan does."""
    source, how = request.param.split("/")
    out = tmp_path_factory.mktemp("dcp")
    root = write_tokens(tmp_path_factory.mktemp("data"))
    torchrun(2, root, out, "save", source, how, STEPS, SAVE_AT)
    assert (out / "ckpt" / ".metadata").exists()
    return [str(root), str(out), source, how]


@pytest.mark.integration
def test_2_ranks_resume_a_dcp_checkpoint_with_identical_batches_and_weights(
    saved: list[str],
) -> None:
    root, out, source, how = saved
    torchrun(2, root, out, "resume", source, how, STEPS, SAVE_AT)
    straight = json.loads((Path(out) / "save-2.json").read_text())
    assert len(straight) == STEPS
    assert json.loads((Path(out) / "resume-2.json").read_text()) == straight[SAVE_AT:]
    a, b = torch.load(Path(out) / "save-2.pt"), torch.load(Path(out) / "resume-2.pt")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.integration
def test_1_rank_resumes_a_dcp_checkpoint_of_2_with_identical_global_batches(
    saved: list[str],
) -> None:
    # The global batch of a step does not depend on the number of ranks; the weights do
    # (DDP averages other slices), so only the batches are compared.
    root, out, source, how = saved
    torchrun(1, root, out, "resume", source, how, STEPS, SAVE_AT)
    straight = json.loads((Path(out) / "save-2.json").read_text())
    assert json.loads((Path(out) / "resume-1.json").read_text()) == straight[SAVE_AT:]
