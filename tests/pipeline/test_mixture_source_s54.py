"""A mixture member whose batch holds a ``source`` array (the key the mixture adds) is
refused at every read, naming it, whatever the step and whichever member it is; a token
source beside padded rows is told the one fn that mixes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from headrace.errors import DataError  # noqa: E402
from headrace.formats import PaddedRows, TableSource, TokenSource  # noqa: E402
from headrace.pipeline import Loader, Mapped, Mixture  # noqa: E402

OWN = r"source 'hub' returns a 'source' array, which the mixture adds \(each sample's source id\)"


def tables(root: Path) -> dict[str, TableSource]:
    """Two SFT tables as the Hub gives them: ``hub`` with a ``source`` column (the dataset
    each row came from), ``chat`` without."""
    ids = pa.array([[i, i + 1, i + 2] for i in range(32)], pa.list_(pa.int32()))
    pq.write_table(pa.table({"input_ids": ids}), root / "chat.parquet")
    pq.write_table(pa.table({"input_ids": ids, "source": [7] * 32}), root / "hub.parquet")
    return {n: TableSource(root / f"{n}.parquet", width=4) for n in ("chat", "hub")}


@pytest.mark.parametrize("step", [0, 5])
def test_a_member_other_than_the_first_with_a_source_column_is_named(
    tmp_path: Path, step: int
) -> None:
    # It was refused as "mixture sources differ in keys: ... (only in 'hub': ['source'])
    # ...: map one source's arrays to the other's layout", not the key's own refusal (that
    # came only where 'hub' was the first member checked).
    with (
        Loader(Mixture(tables(tmp_path), [1, 1], batch_size=4), batch_size=4, steps=8) as ld,
        pytest.raises(DataError, match=OWN),
    ):
        ld.step = step
        next(iter(ld))


def _tag_late(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """A user's fn that tags some rows' provenance: from sample 20 on, a ``source`` too."""
    if len(samples) and int(samples.numbers.max()) >= 20:
        return {**arrays, "source": np.zeros(len(samples), np.int64)}
    return arrays


def test_a_member_that_adds_a_source_array_at_a_later_step_is_named(tmp_path: Path) -> None:
    # It was refused as "mixture sources differ in keys ... (only in 'hub': ['source'])"
    # (or, with 'hub' alone, as differing from itself), the key's refusal never said.
    t = tables(tmp_path)
    mix = Mixture({"chat": t["chat"], "hub": Mapped(t["chat"], _tag_late)}, [1, 1], batch_size=4)
    with Loader(mix, batch_size=4, steps=16) as ld:
        got = []
        with pytest.raises(DataError, match=OWN):
            for b in ld:
                got.append(b)
        assert got and ld.step == len(got)  # read until the member added it


def test_the_refusal_holds_on_the_next_read_of_the_same_mixture(tmp_path: Path) -> None:
    # The key was looked for only in the first part checked, once: the same mixture read
    # again (a loader resumed in the same process) passed, the member's 'source' column
    # silently overwritten by the mixture's ids.
    mix = Mixture({"hub": tables(tmp_path)["hub"]}, [1], batch_size=4)
    for _ in range(2):
        with pytest.raises(DataError, match=OWN):
            mix.read(0, np.arange(4, dtype=np.int64))


def _as_rows(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """The fn the refusal below names, as a user pastes it."""
    return {
        **arrays,
        "loss_mask": np.ones(arrays["x"].shape, bool),
        "x": arrays["x"].astype(np.int32),
        "y": arrays["y"].astype(np.int32),
    }


@pytest.mark.parametrize("first", ["web", "sft"])
def test_a_token_source_beside_padded_rows_is_told_the_fn_that_mixes_them(
    tmp_path: Path, first: str
) -> None:
    # A pretraining stream beside SFT rows was told only "map one source's arrays to the
    # other's layout with Mapped(source, fn)" (loss_mask only in 'sft'), and once given a
    # loss_mask, refused again for its uint16 ids.
    rng = np.random.default_rng(0)
    rng.integers(0, 50_000, 4_000, dtype=np.uint16).tofile(tmp_path / "web.bin")
    np.save(tmp_path / "sft.npy", rng.integers(1, 50_000, (40, 17), dtype=np.uint16))
    web = TokenSource(tmp_path / "web.bin", dtype="uint16", context=16)
    sft = PaddedRows(tmp_path / "sft.npy", context=16, ignore_index=-100)
    order = ["web", "sft"] if first == "web" else ["sft", "web"]
    with pytest.raises(
        DataError,
        match=r"only in 'sft': \['loss_mask'\].*give 'web' a loss_mask \(each of its targets "
        r"counts\) with Mapped\(source, fn\), fn\(arrays, samples\) returning \{\*\*arrays, "
        r"'loss_mask': np.ones\(arrays\['x'\].shape, bool\), "
        r"'x': arrays\['x'\].astype\(np.int32\), 'y': arrays\['y'\].astype\(np.int32\)\}",
    ):
        mix = Mixture({n: {"web": web, "sft": sft}[n] for n in order}, [1, 1], batch_size=8)
        Mixture.read(mix, 0, np.arange(8, dtype=np.int64))
    fixed = {"web": Mapped(web, _as_rows), "sft": sft}
    got = Mixture({n: fixed[n] for n in order}, [1, 1], batch_size=8).read(0, np.arange(8))
    tokens = np.fromfile(tmp_path / "web.bin", dtype=np.uint16)
    from_web = got["source"] == order.index("web")
    assert from_web.any() and got["loss_mask"][from_web].all()
    for x in got["x"][from_web]:  # each window as the file holds it
        at = np.flatnonzero(tokens[:-16] == x[0])
        assert any(np.array_equal(tokens[a : a + 16], x) for a in at)
