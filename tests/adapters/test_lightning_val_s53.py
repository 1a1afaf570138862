"""Every validation of a real Lightning ``Trainer`` sees the same batches (sessions 52-53).

Lightning makes a new iterator for each evaluation (sanity check, validation, test) and
its own loaders start each at their first batch; it keeps the last one's iterator until
the next. Until session 52 a val loader's state saved after the sanity check (the
user's ``on_save_checkpoint``: Lightning saves none for evaluation loaders) named step 2,
and an exact pass loaded from it outside Lightning left out its first 2 batches. Until
session 53 a ``HeadraceDataLoader`` over ``steps=`` gave its batches to the first
validation and none to the next (over ``steps=None``, each validation the stream's next
batches), and so did a stock ``DataLoader(ds, batch_size=None)`` without workers (the
sanity check took 2 batches, the first validation got 1, later ones none); with workers
its batches were right, but each validation warned that it "starts at step 0 again".
Now each starts where the loader stood before the first one (a state loaded, or step
0), an exact pass at its first batch once a validation has gone through it.

One script, one Lightning import (10-35 s a script on 2 loaded cores; these cases were
two scripts until session 53), three fits and a validate, on 6 training and 5
validation batches:

* A: 2 epochs, a sanity check of 2 batches, a checkpoint every 3 training steps (each
  val loader's state saved in ``on_save_checkpoint``); val loaders over ``steps=5``
  (0 workers), ``steps=3`` (2 workers), ``steps=3`` stock (0 and 2 forked workers), and
  an exact pass (2 workers) last, whose iterator Lightning keeps.
* B: A resumed from its checkpoint of step 3, the val states loaded in
  ``on_load_checkpoint``.
* C: 2 epochs with ``limit_val_batches=2`` and a sanity check of 1, then
  ``trainer.validate()``, over a ``steps=None`` stream (state loaded at step 2), an
  exact pass preempted at step 1 (2 persistent workers), and the stream as stock
  DataLoaders (0 workers; 2 persistent forkserver workers); its training loader a stock
  DataLoader over ``steps=2`` with 2 workers, whose second epoch repeats the first: the
  one warning of a repeat the script gives.

Each batch is digested (SHA-256 of its fields' bytes) and compared with a plain
``Loader``'s. Lightning is imported under ``__main__`` only, so the val loaders'
forkserver workers do not import it.
"""

from __future__ import annotations

import hashlib
import importlib.util
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
# Looked up, not imported: every xdist worker collects this module, and importing
# Lightning costs each 4-6 s of CPU for the one that runs it.
if importlib.util.find_spec("lightning") is None:
    pytest.skip("pip install lightning (in the test extra)", allow_module_level=True)

pytestmark = pytest.mark.integration

_SCRIPT = """\
import hashlib, json, warnings
from pathlib import Path
import torch
from torch.utils.data import DataLoader
from headrace import torch as ht
from headrace.formats import TokenSource

D = Path({root!r})

def dataset(name, **kw):
    return ht.TorchDataset(TokenSource(D / name, dtype="uint16", context=8), batch_size=4, **kw)

def at(ds, step):
    ds.load_state_dict(ds.state_at(step))
    return ds

def steps(states):
    return {{k: s["step"] for k, s in states.items()}}

def digest(batch):
    return hashlib.sha256(b"".join(batch[k].numpy().tobytes() for k in sorted(batch))).hexdigest()

def main():
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    warnings.filterwarnings("ignore", ".*IterableDataset. has .__len__.*")
    warnings.filterwarnings("ignore", ".*does not have many workers.*")

    class Model(L.LightningModule):
        def __init__(self, train, vals):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.train_dl, self.vals = train, vals
            # The val loaders with a state (a stock DataLoader has none).
            self.headrace = {{k: v for k, v in vals.items() if hasattr(v, "state_dict")}}
            self.record = {{"train": [], "val": [], "states": [], "saved": {{}}}}

        def train_dataloader(self):
            return self.train_dl

        def val_dataloader(self):
            return list(self.vals.values())

        def training_step(self, batch, index):
            self.record["train"].append(digest(batch))
            return self.w * batch["x"].float().mean()

        def on_train_epoch_start(self):
            # Between validations: where the next one starts.
            self.record["states"].append(steps(self.states()))

        def on_validation_epoch_start(self):
            self.seen = {{k: [] for k in self.vals}}

        def validation_step(self, batch, index, dataloader_idx=0):
            self.seen[list(self.vals)[dataloader_idx]].append(digest(batch))

        def on_validation_epoch_end(self):
            self.record["val"].append([self.trainer.sanity_checking, self.seen])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def on_save_checkpoint(self, checkpoint):
            checkpoint["val"] = self.states()
            self.record["saved"][self.global_step] = steps(checkpoint["val"])

        def states(self):
            return {{k: v.state_dict() for k, v in self.headrace.items()}}

        def on_load_checkpoint(self, checkpoint):
            for k, v in self.headrace.items():
                v.load_state_dict(checkpoint["val"][k])

    def trainer(**kw):
        return L.Trainer(accelerator="cpu", devices=1, max_epochs=2, logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=D, **kw)

    def val(**kw):
        return dataset("val.bin", seed=0, **kw)

    def first(**loaders):  # the demanding user's: the exact pass, read by 2 workers
        return {{**loaders, "pass": ht.HeadraceDataLoader(val(epochs=1), num_workers=2)}}

    train = lambda: ht.HeadraceDataLoader(dataset("train.bin", seed=1, epochs=1))
    every = ModelCheckpoint(dirpath=D / "ckpt", every_n_train_steps=3, save_top_k=-1,
                            filename="{{step}}")
    model = Model(train(), first(
        steps=ht.HeadraceDataLoader(val(steps=5)),
        steps2=ht.HeadraceDataLoader(val(steps=3), num_workers=2),
        stock=DataLoader(val(steps=3), batch_size=None),
        stock2=DataLoader(val(steps=3), batch_size=None, num_workers=2),
    ))
    trainer(num_sanity_val_steps=2, callbacks=[every]).fit(model)
    print(json.dumps(model.record))

    resumed = Model(train(), first(steps=ht.HeadraceDataLoader(val(steps=5))))
    trainer(num_sanity_val_steps=2, enable_checkpointing=False).fit(
        resumed, ckpt_path=D / "ckpt" / "step=3.ckpt")
    print(json.dumps(resumed.record))

    exact = ht.HeadraceDataLoader(at(val(epochs=1), 1), num_workers=2, persistent_workers=True)
    repeats = DataLoader(dataset("train.bin", seed=1, steps=2), batch_size=None, num_workers=2)
    model = Model(repeats, dict(
        stream=ht.HeadraceDataLoader(at(val(), 2)),
        exact=exact,
        stock=DataLoader(at(val(), 2), batch_size=None),
        stock2=DataLoader(at(val(), 2), batch_size=None, num_workers=2,
                          persistent_workers=True, multiprocessing_context="forkserver"),
    ))
    limited = trainer(num_sanity_val_steps=1, limit_val_batches=2, enable_checkpointing=False)
    limited.fit(model)
    limited.validate(model, verbose=False)
    exact.close()
    print(json.dumps(model.record))

if __name__ == "__main__":
    main()
"""

Record = dict[str, Any]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Record, Record, Record, str]:
    """The data folder; the records of fits A, B and C; the script's stderr."""
    root = tmp_path_factory.mktemp("lightning_val")
    rng = np.random.default_rng(0)
    rng.integers(0, 50_000, 6 * 4 * 8 + 1, dtype=np.uint16).tofile(root / "train.bin")
    rng.integers(0, 50_000, 5 * 4 * 8 + 1, dtype=np.uint16).tofile(root / "val.bin")
    script = root / "val_again.py"
    script.write_text(_SCRIPT.format(root=str(root)))
    # Three fits and a validate in one script: 20 s alone, past 120 s on a loaded machine
    # (a CI beside other jobs); the bound is on a hang.
    done: subprocess.CompletedProcess[str] = run_script(script, timeout=420)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(s) for s in done.stdout.splitlines() if s.startswith("{")]
    assert len(lines) == 3, done.stdout
    return root, lines[0], lines[1], lines[2], done.stderr


def _digest(batch: dict[str, Any]) -> str:
    return hashlib.sha256(b"".join(batch[k].tobytes() for k in sorted(batch))).hexdigest()


def _batches(root: Path, name: str = "val.bin", **kw: Any) -> list[str]:
    source = TokenSource(root / name, dtype="uint16", context=8)
    with Loader(source, batch_size=4, **{"seed": 0, **kw}) as ld:
        return [_digest(b) for b, _ in zip(ld, range(6), strict=False)]


def test_a_val_state_saved_after_the_sanity_check_names_step_0(
    runs: tuple[Path, Record, Record, Record, str],
) -> None:
    """It named step 2: the sanity check's batches, which Lightning throws away."""
    root, first, _, _, _ = runs
    whole = _batches(root, epochs=1)
    sanity = first["val"][0]
    assert sanity[0] is True and sanity[1]["pass"] == whole[:2], sanity
    zero = {"steps": 0, "steps2": 0, "pass": 0}
    assert first["saved"]["3"] == zero, first["saved"]
    assert first["saved"]["6"] == zero, first["saved"]
    # After a validation: where the next starts (the stream's step 0 again: until session
    # 53 its end, and each later validation got none).
    assert first["saved"]["9"] == zero, first["saved"]
    # The state saved at step 3, loaded outside Lightning: the whole pass.
    from headrace.torch import HeadraceDataLoader, TorchDataset

    source = TokenSource(root / "val.bin", dtype="uint16", context=8)
    ds = TorchDataset(source, batch_size=4, seed=0, epochs=1)
    dl = HeadraceDataLoader(ds)
    dl.load_state_dict(ds.state_at(first["saved"]["3"]["pass"]))
    assert [_digest({k: t.numpy() for k, t in b.items()}) for b in dl] == whole


def test_each_validation_is_the_whole_pass_and_the_steps_loader_starts_at_0(
    runs: tuple[Path, Record, Record, Record, str],
) -> None:
    root, first, resumed, _, _ = runs
    whole, stream = _batches(root, epochs=1), _batches(root, steps=5)
    real = [v[1] for v in first["val"] if not v[0]]
    assert [v["pass"] for v in real] == [whole, whole], real
    # The stream's validations: its first 5 steps, not steps 2-4 after the sanity
    # check's (and since session 53 the second too, which had none left).
    assert [v["steps"] for v in real] == [stream, stream], real
    # Resumed mid-epoch from the state saved at step 3: the same validations.
    assert [v[0] for v in resumed["val"]] == [False, False], resumed["val"]
    assert [v[1]["pass"] for v in resumed["val"]] == [whole, whole]
    assert resumed["val"][0][1]["steps"] == stream
    # And training goes on from step 3, as the uninterrupted run did.
    assert resumed["train"] == first["train"][3:]


@pytest.mark.parametrize(
    ("name", "steps"), [("steps", 5), ("steps2", 3), ("stock", 3), ("stock2", 3)]
)
def test_every_validation_sees_the_same_batches(
    runs: tuple[Path, Record, Record, Record, str], name: str, steps: int
) -> None:
    """A ``HeadraceDataLoader`` with 0 workers (its second validation got none) and with
    2 (its first got 1 batch of 3), a stock DataLoader without workers (the same), one
    with 2 (it warned; see below)."""
    root, first, _, _, _ = runs
    batches = _batches(root, steps=steps)
    assert len(batches) == steps
    # The sanity check: the loader's first 2 batches; then 2 validations of them all.
    assert [v[1][name] for v in first["val"]] == [batches[:2], batches, batches], first["val"]
    assert [v[0] for v in first["val"]] == [True, False, False]
    # Between validations each headrace loader's state names where the next one starts.
    assert first["states"] == [{"steps": 0, "steps2": 0, "pass": 0}] * 2, first["states"]


def test_a_state_loaded_before_the_fit_is_where_each_validation_starts(
    runs: tuple[Path, Record, Record, Record, str],
) -> None:
    """``limit_val_batches=2``, sanity check of 1 batch: the stream's (state loaded at step
    2) steps 2 and 3 every time, headrace or stock, 0 workers or 2 persistent ones; the
    pass resumes at step 1 in its first validation (the sanity check moved it not), then
    each validation is its first 2 batches."""
    root, _, _, limited, _ = runs
    stream, exact = _batches(root), _batches(root, epochs=1)
    sanity, *real = limited["val"]
    assert [sanity[0], *(v[0] for v in real)] == [True, False, False, False], limited["val"]
    for name in ("stream", "stock", "stock2"):
        assert [v[1][name] for v in limited["val"]] == [stream[2:3], *[stream[2:4]] * 3], name
    # The fit's two validations, then trainer.validate().
    got = [v[1]["exact"] for v in limited["val"]]
    assert got == [exact[1:2], exact[1:3], exact[:2], exact[:2]], got
    assert limited["states"] == [{"stream": 2, "exact": 1}, {"stream": 2, "exact": 0}]


def test_only_a_training_loader_that_repeats_is_warned_of(
    runs: tuple[Path, Record, Record, Record, str],
) -> None:
    """A stock DataLoader's workers warned at each validation that it "starts at step 0
    again" (with persistent ones, at step 2), telling the user to give ``steps=epochs *
    steps_per_epoch``: under Lightning's evaluation loop, starting again is the point. The
    training loader of fit C (2 workers over ``steps=2``, 2 epochs) still warns, once."""
    root, _, _, limited, stderr = runs
    train = _batches(root, "train.bin", seed=1, steps=2)
    assert limited["train"] == train * 2  # each epoch the same batches, as warned
    assert stderr.count("again, where the last one began") == 1, stderr[-3000:]
    assert "starts at step 0 again" in stderr
    # No validation found its loader's run over.
    assert "this iteration yields nothing" not in stderr, stderr[-3000:]
