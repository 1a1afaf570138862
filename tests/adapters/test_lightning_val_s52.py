"""Validation under a real Lightning ``Trainer(num_sanity_val_steps=2)`` (session 52).

Lightning keeps the validation iterator after its sanity check until the first
validation makes a new one: a val loader's state saved meanwhile (the user's
``on_save_checkpoint``, Lightning saves none for evaluation loaders) named step 2, and a
state of the exact pass loaded from it outside Lightning left out its first 2 batches; a
val loader over ``steps=`` began its first validation at step 2, the sanity check's
batches taken from it. Lightning's own loaders start each evaluation afresh: a sanity
check moves none, so it moves no headrace loader either.

One script (one Lightning import, 10-14 s): a fit of 2 epochs, checkpointed every 3
steps (mid-epoch, before the first validation), then a fit resumed from the checkpoint
of step 3, the val states loaded in ``on_load_checkpoint``; each prints a JSON record.
Lightning is imported under ``__main__`` only, so the val loader's forkserver workers do
not import it.
"""

from __future__ import annotations

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
import json, sys, warnings
from pathlib import Path
import torch
from headrace import torch as ht
from headrace.formats import TokenSource

D = Path({root!r})

def source(name):
    return TokenSource(D / name, dtype="uint16", context=8)

def main():
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    warnings.filterwarnings("ignore", ".*IterableDataset. has .__len__.*")

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            train = ht.TorchDataset(source("train.bin"), batch_size=4, seed=1, epochs=1)
            self.train_dl = ht.HeadraceDataLoader(train, num_workers=0)
            # The demanding user's validation: the exact pass, read by 2 workers; and a
            # loader over steps= beside it.
            val = ht.TorchDataset(source("val.bin"), batch_size=4, seed=0, epochs=1)
            self.pass_dl = ht.HeadraceDataLoader(val, num_workers=2)
            stream = ht.TorchDataset(source("val.bin"), batch_size=4, seed=0, steps=5)
            self.steps_dl = ht.HeadraceDataLoader(stream, num_workers=0)
            self.record = {{"train": [], "val": [], "saved": {{}}}}

        def train_dataloader(self):
            return self.train_dl

        def val_dataloader(self):
            # The pass last: Lightning keeps the iterator of the last one it validated on.
            return [self.steps_dl, self.pass_dl]

        def training_step(self, batch, index):
            self.record["train"].append(batch["sample"].tolist())
            return self.w * batch["x"].float().mean()

        def on_validation_epoch_start(self):
            self.seen = {{0: [], 1: []}}

        def validation_step(self, batch, index, dataloader_idx=0):
            # The pass's sample numbers; the stream's first token of each row.
            got = batch["sample"] if dataloader_idx == 1 else batch["x"][:, 0]
            self.seen[dataloader_idx].append(got.tolist())

        def on_validation_epoch_end(self):
            self.record["val"].append([self.trainer.sanity_checking, self.seen[1], self.seen[0]])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def on_save_checkpoint(self, checkpoint):
            checkpoint["val"] = [self.pass_dl.state_dict(), self.steps_dl.state_dict()]
            self.record["saved"][self.global_step] = [s["step"] for s in checkpoint["val"]]

        def on_load_checkpoint(self, checkpoint):
            self.pass_dl.load_state_dict(checkpoint["val"][0])
            self.steps_dl.load_state_dict(checkpoint["val"][1])

    def trainer(**kw):
        return L.Trainer(accelerator="cpu", devices=1, max_epochs=2, num_sanity_val_steps=2,
                         logger=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=D, **kw)

    every = ModelCheckpoint(dirpath=D / "ckpt", every_n_train_steps=3, save_top_k=-1,
                            filename="{{step}}")
    model = Model()
    trainer(callbacks=[every]).fit(model)
    print(json.dumps(model.record))
    resumed = Model()
    trainer().fit(resumed, ckpt_path=D / "ckpt" / "step=3.ckpt")
    print(json.dumps(resumed.record))

if __name__ == "__main__":
    main()
"""


def _source(root: Path, name: str) -> TokenSource:
    return TokenSource(root / name, dtype="uint16", context=8)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """The data folder, the first fit's record and the resumed fit's."""
    root = tmp_path_factory.mktemp("lightning_val")
    rng = np.random.default_rng(0)
    rng.integers(0, 50_000, 6 * 4 * 8 + 1, dtype=np.uint16).tofile(root / "train.bin")
    rng.integers(0, 50_000, 5 * 4 * 8 + 1, dtype=np.uint16).tofile(root / "val.bin")
    script = root / "val_states.py"
    script.write_text(_SCRIPT.format(root=str(root)))
    done: subprocess.CompletedProcess[str] = run_script(script)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(s) for s in done.stdout.splitlines() if s.startswith("{")]
    assert len(lines) == 2, done.stdout
    return root, lines[0], lines[1]


def _pass(root: Path) -> list[list[int]]:
    with Loader(_source(root, "val.bin"), batch_size=4, seed=0, epochs=1) as ld:
        return [b["sample"].tolist() for b in ld]


def _stream(root: Path) -> list[list[int]]:
    with Loader(_source(root, "val.bin"), batch_size=4, seed=0, steps=5) as ld:
        return [b["x"][:, 0].tolist() for b in ld]


def test_a_val_state_saved_after_the_sanity_check_names_step_0(
    runs: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    """It named step 2: the sanity check's batches, which Lightning throws away."""
    root, first, _ = runs
    sanity = first["val"][0]
    assert sanity[0] is True and sanity[1] == _pass(root)[:2], sanity
    assert first["saved"]["3"] == [0, 0], first["saved"]
    assert first["saved"]["6"] == [0, 0], first["saved"]
    # After a validation: where the next starts (the stream's step 0 again: until session
    # 53 its end, and each later validation got none; test_lightning_val_s53.py).
    assert first["saved"]["9"] == [0, 0], first["saved"]
    # The state saved at step 3, loaded outside Lightning: the whole pass.
    from headrace.torch import HeadraceDataLoader, TorchDataset

    ds = TorchDataset(_source(root, "val.bin"), batch_size=4, seed=0, epochs=1)
    dl = HeadraceDataLoader(ds)
    dl.load_state_dict(ds.state_at(first["saved"]["3"][0]))
    assert [b["sample"].tolist() for b in dl] == _pass(root)


def test_each_validation_is_the_whole_pass_and_the_steps_loader_starts_at_0(
    runs: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    root, first, resumed = runs
    whole, stream = _pass(root), _stream(root)
    real = [v for v in first["val"] if not v[0]]
    assert [v[1] for v in real] == [whole, whole], real
    # The stream's validations: its first 5 steps, not steps 2-4 after the sanity
    # check's (and since session 53 the second too, which had none left).
    assert [v[2] for v in real] == [stream, stream], real
    # Resumed mid-epoch from the state saved at step 3: the same validations.
    assert [v[0] for v in resumed["val"]] == [False, False], resumed["val"]
    assert [v[1] for v in resumed["val"]] == [whole, whole]
    assert resumed["val"][0][2] == stream
    # And training goes on from step 3, as the uninterrupted run did.
    assert resumed["train"] == first["train"][3:]
