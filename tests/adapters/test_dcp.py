"""torch.distributed.checkpoint (DCP): model, optimizer and loader in one checkpoint,
saved by 2 ranks (gloo, CPU, DDP), resumed by 2 ranks and by 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

import torch.distributed.checkpoint as dcp  # noqa: E402
from _adapter_data import BATCH, padded_mixture, ranks, token_source, write_tokens  # noqa: E402

from headrace.errors import StateError  # noqa: E402
from headrace.plan import legacy_digest  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402
from headrace.torch import DCPStateful  # noqa: E402

STEPS, SAVE_AT = 10, 4


VARIANTS = ["padded-mixture/adapter", "tokens/per-rank"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """Two ranks train to STEPS and save with DCP at SAVE_AT, once for each variant (one
    launch runs them all): ``adapter`` keeps the state through ``DCPStateful``,
    ``per-rank`` as torchtitan does (pickled, a key a rank). The data root and each
    variant's output folder."""
    root = write_tokens(tmp_path_factory.mktemp("data"))
    outs = {variant: tmp_path_factory.mktemp("dcp") for variant in VARIANTS}
    _launch(2, "save", root, outs)
    for out in outs.values():
        assert (out / "ckpt" / ".metadata").exists()
    return root, outs


def _launch(world: int, mode: str, root: Path, outs: dict[str, Path]) -> None:
    runs = [f"{out}:{variant.replace('/', ':')}" for variant, out in outs.items()]
    ranks(world, "dcp_train.py", root, mode, STEPS, SAVE_AT, *runs)


@pytest.fixture(scope="module")
def resumed_by_2(saved: tuple[Path, dict[str, Path]]) -> dict[str, Path]:
    _launch(2, "resume", *saved)
    return saved[1]


@pytest.fixture(scope="module")
def resumed_by_1(saved: tuple[Path, dict[str, Path]]) -> dict[str, Path]:
    _launch(1, "resume", *saved)
    return saved[1]


@pytest.mark.integration
@pytest.mark.parametrize("variant", VARIANTS)
def test_2_ranks_resume_a_dcp_checkpoint_with_identical_batches_and_weights(
    resumed_by_2: dict[str, Path], variant: str
) -> None:
    out = resumed_by_2[variant]
    straight = json.loads((out / "save-2.json").read_text())
    assert len(straight) == STEPS
    assert json.loads((out / "resume-2.json").read_text()) == straight[SAVE_AT:]
    a, b = torch.load(out / "save-2.pt"), torch.load(out / "resume-2.pt")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.integration
@pytest.mark.parametrize("variant", VARIANTS)
def test_1_rank_resumes_a_dcp_checkpoint_of_2_with_identical_global_batches(
    resumed_by_1: dict[str, Path], variant: str
) -> None:
    # The global batch of a step does not depend on the number of ranks; the weights do
    # (DDP's mean of 2 ranks' mean losses is not 1 rank's mean when masks leave the
    # slices different numbers of targets), so only the batches are compared.
    out = resumed_by_1[variant]
    straight = json.loads((out / "save-2.json").read_text())
    assert json.loads((out / "resume-1.json").read_text()) == straight[SAVE_AT:]


# -- in this process (DCP saves and loads without a process group): the adapter's edges --
one_process = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def _loader(root: Path, source: Any) -> Any:
    from headrace.torch import HeadraceDataLoader, TorchDataset

    return HeadraceDataLoader(TorchDataset(source, batch_size=BATCH, seed=1, steps=STEPS))


@one_process
def test_the_adapter_resumes_in_one_process_and_refuses_other_data_by_name(
    tmp_path: Path,
) -> None:
    root = write_tokens(tmp_path)
    with _loader(root, padded_mixture(root)) as dl:
        it = iter(dl)
        next(it), next(it)
        dcp.save({"dataloader": DCPStateful(dl)}, checkpoint_id=str(tmp_path / "c"), no_dist=True)
        rest = batch_digest(it)
    with _loader(root, padded_mixture(root)) as again:
        dcp.load(
            {"dataloader": DCPStateful(again)}, checkpoint_id=str(tmp_path / "c"), no_dist=True
        )
        assert again.step == 2
        assert batch_digest(again) == rest
    # Other data: headrace's own refusal, naming what differs (the loader itself, keyed
    # leaf by leaf, failed inside DCP: "Missing key in checkpoint state_dict:
    # dataloader.parts.files").
    with _loader(root, token_source(root)) as other:
        with pytest.raises(StateError, match=r"saved on different data.*what differs: "):
            dcp.load(
                {"dataloader": DCPStateful(other)}, checkpoint_id=str(tmp_path / "c"), no_dist=True
            )


@one_process
def test_the_adapter_loads_a_state_with_fewer_parts_as_headrace_does(tmp_path: Path) -> None:
    # A state saved before a part was added to a mixture's description ("order") still
    # loads in headrace; kept as one leaf, DCP does not ask for the missing key.
    root = write_tokens(tmp_path)
    with _loader(root, padded_mixture(root)) as dl:
        it = iter(dl)
        next(it)
        state = dl.state_dict()
        rest = batch_digest(it)
    old = {**state, "parts": {k: v for k, v in state["parts"].items() if k != "order"}}
    old["fingerprint"] = legacy_digest(padded_mixture(root).fingerprint())
    assert old["fingerprint"] is not None and old["fingerprint"] != state["fingerprint"]
    dcp.save(
        {"dataloader": {"headrace": json.dumps(old)}},
        checkpoint_id=str(tmp_path / "c"),
        no_dist=True,
    )
    with _loader(root, padded_mixture(root)) as again:
        dcp.load(
            {"dataloader": DCPStateful(again)}, checkpoint_id=str(tmp_path / "c"), no_dist=True
        )
        assert again.step == 1
        assert batch_digest(again) == rest


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"step": 3}, r"not a DCPStateful state: \{'step': 3\}"),
        ({"headrace": 5}, r"not a DCPStateful state"),
        ({"headrace": "{oops"}, r"DCPStateful state '\{oops' is not JSON"),
        ({"headrace": '{"step": 3}'}, r"not a headrace loader state: it has no 'seed'"),
    ],
)
def test_the_adapter_refuses_a_state_that_is_not_its_own(
    tmp_path: Path, state: dict[str, Any], message: str
) -> None:
    root = write_tokens(tmp_path)
    with _loader(root, token_source(root)) as dl:
        with pytest.raises(StateError, match=message):
            DCPStateful(dl).load_state_dict(state)
        assert dl.step == 0
