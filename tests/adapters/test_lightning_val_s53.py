"""Every validation of a real Lightning ``Trainer`` sees the same batches (session 53).

A val loader over ``steps=`` gave its batches to the first validation and none to the
next: Lightning makes a new iterator for each evaluation, and a ``HeadraceDataLoader``
went on from where the last one stopped (its run over, it said only "this iteration
yields nothing"); over ``steps=None`` each validation saw the stream's next batches.
Lightning's own loaders start each evaluation afresh, and so does a headrace loader now:
where it stood before the first one (a state loaded, or step 0), an exact pass at its
first batch once a validation has gone through it.

One script (one Lightning import): a fit of 2 epochs over two ``steps=3`` val loaders
(0 and 2 workers) with a sanity check of 2 batches; then a fit of 2 epochs with
``limit_val_batches=2`` and a sanity check of 1, over a ``steps=None`` stream and an exact
pass (2 persistent workers), each with a state loaded before the fit, followed by a
``trainer.validate()``. Each batch is digested (SHA-256 of its fields' bytes) and
compared with a plain ``Loader``'s.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _adapter_data import run_script

from headrace.formats import TokenSource
from headrace.pipeline import Loader

pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")
pytest.importorskip("lightning", reason="pip install lightning (in the test extra)")

pytestmark = pytest.mark.integration

_SCRIPT = """\
import hashlib, json, warnings
from pathlib import Path
import torch
from headrace import torch as ht
from headrace.formats import TokenSource

D = Path({root!r})

def dataset(name, **kw):
    return ht.TorchDataset(TokenSource(D / name, dtype="uint16", context=8), batch_size=4, **kw)

def digest(batch):
    return hashlib.sha256(b"".join(batch[k].numpy().tobytes() for k in sorted(batch))).hexdigest()

def main():
    import lightning as L

    warnings.filterwarnings("ignore", ".*IterableDataset. has .__len__.*")
    warnings.filterwarnings("ignore", ".*does not have many workers.*")

    class Model(L.LightningModule):
        def __init__(self, vals):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.train_dl = ht.HeadraceDataLoader(dataset("train.bin", seed=1, epochs=1))
            self.vals = vals
            self.record = {{"val": [], "states": []}}

        def train_dataloader(self):
            return self.train_dl

        def val_dataloader(self):
            return self.vals

        def training_step(self, batch, index):
            return self.w * batch["x"].float().mean()

        def on_train_epoch_start(self):
            # Between validations: where the next one starts.
            self.record["states"].append([dl.state_dict()["step"] for dl in self.vals])

        def on_validation_epoch_start(self):
            self.seen = [[] for _ in self.vals]

        def validation_step(self, batch, index, dataloader_idx=0):
            self.seen[dataloader_idx].append(digest(batch))

        def on_validation_epoch_end(self):
            self.record["val"].append([self.trainer.sanity_checking, self.seen])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def trainer(**kw):
        return L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False,
                         default_root_dir=D, **kw)

    vals = [ht.HeadraceDataLoader(dataset("val.bin", seed=0, steps=3)),
            ht.HeadraceDataLoader(dataset("val.bin", seed=0, steps=3), num_workers=2)]
    model = Model(vals)
    trainer(max_epochs=2, num_sanity_val_steps=2).fit(model)
    print(json.dumps(model.record))

    stream = ht.HeadraceDataLoader(dataset("val.bin", seed=0))
    stream.load_state_dict(stream.dataset.state_at(2))
    exact = ht.HeadraceDataLoader(dataset("val.bin", seed=0, epochs=1), num_workers=2,
                                  persistent_workers=True)
    exact.load_state_dict(exact.dataset.state_at(1))  # a pass preempted at step 1
    model = Model([stream, exact])
    limited = trainer(max_epochs=2, num_sanity_val_steps=1, limit_val_batches=2)
    limited.fit(model)
    limited.validate(model, verbose=False)
    exact.close()
    print(json.dumps(model.record))

if __name__ == "__main__":
    main()
"""


def _digest(batch: dict[str, Any]) -> str:
    return hashlib.sha256(b"".join(batch[k].tobytes() for k in sorted(batch))).hexdigest()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """The data folder, the record of the fit over ``steps=3`` and of the limited one."""
    root = tmp_path_factory.mktemp("lightning_val_s53")
    rng = np.random.default_rng(0)
    rng.integers(0, 50_000, 2 * 4 * 8 + 1, dtype=np.uint16).tofile(root / "train.bin")
    rng.integers(0, 50_000, 5 * 4 * 8 + 1, dtype=np.uint16).tofile(root / "val.bin")
    script = root / "val_again.py"
    script.write_text(_SCRIPT.format(root=str(root)))
    done: subprocess.CompletedProcess[str] = run_script(script)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(s) for s in done.stdout.splitlines() if s.startswith("{")]
    assert len(lines) == 2, done.stdout
    return root, {**lines[0], "stderr": done.stderr}, lines[1]


def _batches(root: Path, **kw: Any) -> list[str]:
    source = TokenSource(root / "val.bin", dtype="uint16", context=8)
    with Loader(source, batch_size=4, seed=0, **kw) as ld:
        return [_digest(b) for b, _ in zip(ld, range(5), strict=False)]


def test_every_validation_sees_the_same_batches(
    runs: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    root, steps, limited = runs
    first3 = _batches(root, steps=3)
    assert len(first3) == 3
    # The sanity check: each loader's first 2 batches; then 2 validations of all 3 (the
    # second was empty), with 0 workers and with 2.
    assert steps["val"][0] == [True, [first3[:2], first3[:2]]], steps["val"][0]
    assert steps["val"][1:] == [[False, [first3, first3]]] * 2, steps["val"][1:]
    # Between validations each loader's state names where the next one starts.
    assert steps["states"] == [[0, 0]] * 2, steps["states"]
    # No validation found its loader's run over.
    assert "yields nothing" not in steps["stderr"], steps["stderr"][-3000:]

    # limit_val_batches=2, sanity check of 1 batch: the stream's (state loaded at step 2)
    # steps 2 and 3 every time; the pass resumes at step 1 in its first validation (the
    # sanity check moved it not), then each validation is its first 2 batches.
    stream, exact = _batches(root, steps=None), _batches(root, epochs=1)
    sanity, *real = limited["val"]
    assert sanity == [True, [stream[2:3], exact[1:2]]], sanity
    assert real[0] == [False, [stream[2:4], exact[1:3]]], real[0]
    # The fit's second validation, then trainer.validate().
    assert real[1:] == [[False, [stream[2:4], exact[:2]]]] * 2, real[1:]
    assert limited["states"] == [[2, 1], [2, 0]], limited["states"]
