"""The Hugging Face Trainer with a Hugging Face causal LM (a tiny random Llama) over a
HeadraceDataLoader, as docs/frameworks.md's recipe gives it: the batch's fields named as
the model's ``forward`` takes them, the loss the model computes equal to the one over
headrace's targets (no second shift), and ``save_steps`` + ``resume_from_checkpoint``
going on with the uninterrupted run's batches byte for byte and its final parameters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")
transformers = pytest.importorskip("transformers", reason="pip install transformers")

from numpy.typing import NDArray  # noqa: E402
from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from headrace.errors import ConfigError  # noqa: E402
from headrace.formats import TokenSource  # noqa: E402
from headrace.torch import HeadraceDataLoader, TorchDataset  # noqa: E402

L, BATCH, VOCAB = 16, 4, 256


def causal_lm(arrays: dict[str, NDArray[Any]], samples: object) -> dict[str, NDArray[Any]]:
    """docs/frameworks.md's transform: y is shifted already, so it is the model's
    ``shift_labels`` (and ``labels``, which makes the model take a loss at all)."""
    y = arrays["y"].astype(np.int64)
    return {"input_ids": arrays["x"].astype(np.int64), "labels": y, "shift_labels": y}


def renamed(arrays: dict[str, NDArray[Any]], samples: object) -> dict[str, NDArray[Any]]:
    """The trap: headrace's shifted y given as Hugging Face's unshifted ``labels``."""
    return {"input_ids": arrays["x"].astype(np.int64), "labels": arrays["y"].astype(np.int64)}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> TokenSource:
    path = tmp_path_factory.mktemp("hf") / "train.bin"
    np.random.default_rng(0).integers(0, VOCAB, 20_000, dtype=np.uint16).tofile(path)
    return TokenSource([path], dtype="uint16", context=L)


def llama() -> Any:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=L,
    )
    return LlamaForCausalLM(config)


class SaveDataState(TrainerCallback):
    def __init__(self, loader: HeadraceDataLoader) -> None:
        self.loader = loader

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        (folder / "headrace.json").write_text(json.dumps(self.loader.state_dict()))


class HeadraceTrainer(Trainer):
    """Notes each batch the model gets, and the loss the model took of it."""

    def __init__(self, *args: Any, loader: HeadraceDataLoader, **kw: Any) -> None:
        super().__init__(*args, callbacks=[SaveDataState(loader)], **kw)
        self.loader, self.seen = loader, []

    def get_train_dataloader(self) -> Any:
        return self.loader

    def compute_loss(self, model: Any, inputs: Any, *args: Any, **kw: Any) -> Any:
        loss = super().compute_loss(model, inputs, *args, **kw)
        self.seen.append({k: v.clone() for k, v in inputs.items()})
        return loss


def gpt2() -> Any:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=16, n_layer=2, n_head=2))


def train(
    source: TokenSource, out: Path, resume: str | None = None, model: Any = llama, **kw: Any
) -> Any:
    args = TrainingArguments(
        str(out),
        max_steps=4,
        save_steps=2,
        gradient_accumulation_steps=2,
        ignore_data_skip=True,
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        logging_steps=100,
        learning_rate=1e-2,
    )
    loader = HeadraceDataLoader(TorchDataset(source, batch_size=BATCH, seed=3, **kw))
    if resume is not None:
        loader.load_state_dict(json.loads((Path(resume) / "headrace.json").read_text()))
    trainer = HeadraceTrainer(model=model(), args=args, loader=loader)
    trainer.train(resume_from_checkpoint=resume)
    return trainer


@pytest.mark.parametrize("model", [llama, gpt2])
def test_labels_shifted_twice_are_refused(source: TokenSource, tmp_path: Path, model: Any) -> None:
    # Before: trained without a word on each token's next-but-one as its target. (GPT-2
    # sets no loss_type: the Trainer's own _loss_shifts_labels is False for it.)
    with pytest.raises(ConfigError, match="shift_labels") as err:
        train(source, tmp_path, model=model, transform=renamed)
    assert type(model()).__name__ in str(err.value)


def test_batch_without_input_ids_is_refused_naming_the_fields(
    source: TokenSource, tmp_path: Path
) -> None:
    # Before: the model's own "You must specify exactly one of input_ids or inputs_embeds".
    with pytest.raises(ConfigError, match=r"\['x', 'y'\].*input_ids"):
        train(source, tmp_path)


def test_recipe_trains_on_headrace_targets_and_resumes_exactly(
    source: TokenSource, tmp_path: Path
) -> None:
    whole = train(source, tmp_path / "whole", transform=causal_lm)
    assert len(whole.seen) == 8  # 4 optimizer steps of 2 micro-batches
    first = whole.seen[0]
    assert {k: v.dtype for k, v in first.items()} == dict.fromkeys(
        ("input_ids", "labels", "shift_labels"), torch.int64
    )
    # The model's loss is the mean cross-entropy over headrace's own (x, y) pairs.
    model = llama()
    got = model(**first).loss
    logits = model(input_ids=first["input_ids"]).logits
    want = torch.nn.functional.cross_entropy(logits.flatten(0, 1), first["shift_labels"].view(-1))
    assert torch.allclose(got, want)

    part = train(source, tmp_path / "part", transform=causal_lm)
    resumed = train(
        source,
        tmp_path / "part",
        resume=str(tmp_path / "part" / "checkpoint-2"),
        transform=causal_lm,
    )
    assert len(resumed.seen) == 4  # micro-batches 4-7
    for a, b in zip(resumed.seen, whole.seen[4:], strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)
    for p, q in zip(resumed.model.parameters(), whole.model.parameters(), strict=True):
        assert torch.equal(p, q)
    del part
