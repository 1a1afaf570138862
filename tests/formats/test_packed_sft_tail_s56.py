"""An SFT user's packed batches (s56), against a packing of the same rows built here with
NumPy: the padded tail of a validation pass under ``targets=``/``labels=``, and the loss a
PyTorch or Hugging Face training step takes of ``y``.

With ``tail=True`` the last sample is padded with ``pad_id``; with ``ignore_index`` in use
(``targets="documents"``, ``labels=``) its padded targets were ``pad_id`` (0: a real id), so
a loss that ignores -100, as an SFT step's does, took them as targets of token 0. A padded
``labels`` column is padded with ``ignore_index`` for that reason (docs/rows.md); so is the
tail now. ``y`` is shifted already: a Hugging Face model given it as ``labels=`` shifts it
again, without a word; the docs give the call that does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _megatron_pairs import write_pair
from headrace.formats import TokenSource, table_token_files
from headrace.pipeline import Loader

datasets = pytest.importorskip("datasets")

L = 8


def _rows(seed: int = 0) -> tuple[list[Any], list[Any]]:
    """Conversations of 0 to 3L tokens (empty ones, one of exactly L, one longer than a
    sample), each token its stream offset + 1, the first half of each labelled -100."""
    rng = np.random.default_rng(seed)
    lengths = [0, 3, L, 0, 3 * L + 1, 1] + [int(rng.integers(0, 3 * L)) for _ in range(12)]
    ids, labels, at = [], [], 0
    for n in lengths:
        t = np.arange(at + 1, at + n + 1, dtype=np.int32)
        at += n
        lab = t.astype(np.int64)
        lab[: n // 2] = -100
        ids.append(t)
        labels.append(lab)
    if (at - 1) % L == 0:  # a tail of at least one padded target
        ids.append(np.array([at + 1], np.int32))
        labels.append(np.array([at + 1], np.int64))
    return ids, labels


def _save(root: Path, ids: list[Any], labels: list[Any]) -> None:
    feats = datasets.Features(
        {
            "input_ids": datasets.Sequence(datasets.Value("int32")),
            "labels": datasets.Sequence(datasets.Value("int64")),
        }
    )
    ds = datasets.Dataset.from_dict(
        {"input_ids": [a.tolist() for a in ids], "labels": [a.tolist() for a in labels]},
        features=feats,
    )
    ds.save_to_disk(str(root), num_shards=2)


def _targets(ids: list[Any], labels: list[Any] | None) -> dict[int, int]:
    """Every target of the stream (offset 1 to the end) by offset: its label (its id
    without labels), -100 where it begins a row."""
    stream = np.concatenate(ids)
    lab = stream.astype(np.int64) if labels is None else np.concatenate(labels)
    starts = np.cumsum([0] + [len(r) for r in ids])[:-1]
    firsts = {int(s) for s, r in zip(starts, ids, strict=True) if len(r)}
    return {k: -100 if k in firsts else int(lab[k]) for k in range(1, len(stream))}


def _pass(src: TokenSource) -> list[dict[str, Any]]:
    with Loader(src, batch_size=3, epochs=1) as loader:
        return [{k: np.array(v) for k, v in b.items()} for b in loader]


@pytest.mark.parametrize("kind", ["labels", "targets", "megatron"])
def test_a_padded_tail_is_no_target_where_an_ignore_index_is_in_use(
    tmp_path: Path, kind: str
) -> None:
    ids, labels = _rows()
    if kind == "megatron":
        path: Any = write_pair(tmp_path / "web", [[a] for a in ids], np.int32)
    else:
        _save(tmp_path / "ds", ids, labels)
        if kind == "labels":
            path = table_token_files(tmp_path / "ds", "input_ids", labels="labels")
        else:
            with pytest.warns(UserWarning, match="column 'labels' is not read"):
                path = table_token_files(tmp_path / "ds", "input_ids")
    src = TokenSource(
        path,
        context=L,
        shuffle=False,
        tail=True,
        pad_id=7,
        positions="documents",
        targets="documents",
    )
    want = _targets(ids, labels if kind == "labels" else None)
    seen: dict[int, int] = {}
    padded = 0
    for b in _pass(src):
        for i in np.flatnonzero(b["valid"]).tolist():
            first = int(b["x"][i, 0])  # its stream offset + 1
            for j in range(L):
                if b["loss_mask"][i, j]:
                    seen[first + j] = int(b["y"][i, j])
                else:  # a padded target: never one a loss that ignores -100 takes
                    padded += 1
                    assert b["y"][i, j] == -100, (kind, i, j, b["y"][i])
                    assert b["x"][i, j] == 7 or j == 0 or b["x"][i, j] == first + j
    assert padded > 0
    assert seen == want  # every target once, the label or -100 where a row begins


def test_the_loss_of_a_packed_batch_as_the_docs_take_it(tmp_path: Path) -> None:
    """docs/rows.md's loss calls on a TorchDataset batch: ``F.cross_entropy`` of
    ``y.long()`` (int32 targets are refused by torch), and a Hugging Face model given
    ``shift_labels`` (contiguous: its loss takes ``view(-1)``); the same loss as one over
    the targets built here. ``labels=y`` alone gives another loss: the model shifts ``y``
    again."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from headrace.torch import TorchDataset

    F = torch.nn.functional
    ids, labels = _rows(1)
    _save(tmp_path / "ds", ids, labels)
    files = table_token_files(tmp_path / "ds", "input_ids", labels="labels")
    src = TokenSource(files, context=L, positions="documents", targets="documents")
    batch = next(iter(TorchDataset(src, batch_size=4, steps=1)))
    x, y, pos = batch["x"], batch["y"], batch["position_ids"]
    # int64 labels give int64 targets, a view of the labels' rows (not contiguous)
    assert (x.dtype, y.dtype, pos.dtype) == (torch.int32, torch.int64, torch.int32)
    want = _targets(ids, labels)
    mine = torch.tensor([[want[int(r[0]) + j] for j in range(L)] for r in x])
    assert torch.equal(y, mine)
    # without labels, int32 ids give int32 targets, which torch's loss refuses
    with pytest.warns(UserWarning, match="column 'labels' is not read"):
        files = table_token_files(tmp_path / "ds", "input_ids")
    plain = TokenSource(files, context=L, positions="documents", targets="documents")
    plain_y = next(iter(TorchDataset(plain, batch_size=4, steps=1)))["y"]
    assert plain_y.dtype == torch.int32
    flat = torch.zeros(plain_y.numel(), int(plain_y.max()) + 1)
    with pytest.raises(RuntimeError, match="Long"):
        F.cross_entropy(flat, plain_y.reshape(-1), ignore_index=-100)
    F.cross_entropy(flat, plain_y.long().reshape(-1), ignore_index=-100)

    vocab = int(max(x.max(), y.max())) + 1
    cfg = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        logits = model(input_ids=x.long(), position_ids=pos.long()).logits
        ref = F.cross_entropy(logits.reshape(-1, vocab), mine.reshape(-1), ignore_index=-100)
        ours = F.cross_entropy(logits.reshape(-1, vocab), y.long().reshape(-1), ignore_index=-100)
        with pytest.raises(RuntimeError, match="view size"):  # y views the labels' rows
            model(input_ids=x.long(), position_ids=pos.long(), labels=y, shift_labels=y)
        shifted = y.long().contiguous()
        hf = model(
            input_ids=x.long(), position_ids=pos.long(), labels=shifted, shift_labels=shifted
        ).loss
        twice = model(input_ids=x.long(), position_ids=pos.long(), labels=y.long()).loss
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(hf, ref)
    assert not torch.allclose(twice, ref)
