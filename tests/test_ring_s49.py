"""Fields NumPy gives as a subclass of ``ndarray`` (masked arrays, record arrays,
matrices) through the worker ring: each comes out as the bare loader gives it, its mask
and fill value too, through the slots or, for a kind the slots cannot carry, pickled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace._pack import pack, unpack
from headrace._shm_ring import RingConfig, WorkerBatches
from headrace.errors import DataError
from headrace.pipeline import Loader

OPTS = {"batch_size": 3, "seed": 2, "steps": 6, "prefetch": 0}


def _readings(root: Path) -> Path:
    """A .npy file of readings, NaN where a sensor gave none."""
    v = np.arange(40, dtype="<f4").reshape(20, 2)
    v[::3, 1] = np.nan
    v[5, 0] = np.nan
    np.save(root / "r.npy", v)
    return root / "r.npy"


class Readings:
    """Rows of a .npy file as masked arrays (NaN masked), with a record-array and a
    matrix view of them (module level: worker processes import it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": "readings-test", "path": str(self.path)}

    def read(self, seed: int, samples: Any) -> dict[str, Any]:
        rows = np.load(self.path)[np.asarray(samples, dtype=np.int64)]
        masked = np.ma.masked_invalid(rows)
        masked.fill_value = -1.5
        ints = rows.copy()
        ints[np.isnan(ints)] = -1
        hard = np.ma.masked_array(ints[:, 0].astype(">i2"), hard_mask=True)
        hard[np.isnan(rows[:, 0])] = np.ma.masked
        return {
            "v": masked,
            "hard": hard,  # big-endian, a hard mask
            "none": np.ma.masked_array(rows[:, 1] * 0),  # no mask at all (nomask)
            "rec": np.rec.fromarrays([ints[:, 0].astype("<i4"), ints[:, 1]], names="a,b"),
            "mat": ints.view(np.matrix),  # (np.asmatrix warns: pending deprecation)
        }


def _same(got: Any, want: Any, where: str) -> None:
    assert type(got) is type(want), where
    assert got.dtype == want.dtype and got.shape == want.shape, where
    assert np.ma.getdata(got).tobytes() == np.ma.getdata(want).tobytes(), where
    if isinstance(want, np.ma.MaskedArray):
        assert (got.mask is np.ma.nomask) == (want.mask is np.ma.nomask), where
        assert np.array_equal(np.ma.getmaskarray(got), np.ma.getmaskarray(want)), where
        assert got.fill_value == want.fill_value and got.hardmask == want.hardmask, where


@pytest.mark.parametrize(("contiguous", "copy", "workers"), [(False, False, 2), (True, True, 1)])
def test_masked_record_and_matrix_fields_cross_the_slots_as_the_loader_gives_them(
    tmp_path: Path, contiguous: bool, copy: bool, workers: int
) -> None:
    # The slots carried each field's bytes as a plain ndarray: a masked array came out
    # with no mask (every NaN reading unmasked), a record array without its attribute
    # access, a matrix as a 2-D array (whose * is not a matrix product).
    src = Readings(_readings(tmp_path))
    with Loader(src, **OPTS) as ld:
        want = list(ld)
    assert any(np.ma.getmaskarray(b["v"]).any() for b in want)
    cfg = RingConfig(source=src, loader=OPTS, workers=workers, slots=2, contiguous=contiguous)
    wb = WorkerBatches(cfg, copy=copy)
    got = list(wb)
    assert wb.pickled_chunks == 0 and len(wb.shm_names) == workers  # through the slots
    assert len(got) == len(want)
    for t, (g, w) in enumerate(zip(got, want, strict=True)):
        assert list(g) == list(w)
        for k in w:
            _same(g[k], w[k], f"step {t} field {k}")
        assert g["rec"].a.tolist() == w["rec"].a.tolist()
    held = got[1]["v"]  # a view of the slot (leased), mask and all
    assert held.flags.writeable and held.mask.flags.writeable


class Celsius(np.ndarray):
    """A subclass of ndarray of a user's own, which the slots know nothing of."""


class Traces:
    """Rows of a .npy file, several lengths: masked samples of several shapes (NaN
    masked), and a subclass of a user's own (module level: workers import it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": "traces-test", "path": str(self.path)}

    def read(self, seed: int, samples: Any) -> dict[str, Any]:
        rows = np.load(self.path)
        s = np.asarray(samples, dtype=np.int64)
        traces = np.empty(len(s), dtype=object)
        for j, n in enumerate(s.tolist()):
            traces[j] = np.ma.masked_invalid(rows[n, : 1 + n % 2])
        return {"trace": traces, "temp": rows[s].view(Celsius)}


def test_masked_samples_and_other_subclasses_cross_pickled_as_they_are(tmp_path: Path) -> None:
    # Samples of several shapes crossed the slots as plain arrays (a masked sample lost
    # its mask); a subclass the slots cannot rebuild came out a plain ndarray. Both now
    # cross pickled, which keeps them.
    src = Traces(_readings(tmp_path))
    with Loader(src, **OPTS) as ld:
        want = list(ld)
    assert any(e.mask.any() for b in want for e in b["trace"])
    wb = WorkerBatches(RingConfig(source=src, loader=OPTS, workers=1, slots=2))
    got = list(wb)
    assert wb.pickled_chunks > 0
    assert len(got) == len(want)
    for t, (g, w) in enumerate(zip(got, want, strict=True)):
        assert list(g) == list(w)
        _same(g["temp"], w["temp"], f"step {t} temp")
        assert type(g["trace"]) is type(w["trace"]) and len(g["trace"]) == len(w["trace"])
        for j, (ge, we) in enumerate(zip(g["trace"], w["trace"], strict=True)):
            _same(ge, we, f"step {t} trace sample {j}")


def test_pack_refuses_a_masked_field_naming_it(tmp_path: Path) -> None:
    # pack (headrace.torch.pack: a batch as bases and views, to cross a queue) kept a
    # masked field's bytes and dropped its mask: unpack gave every NaN reading unmasked.
    v = np.load(_readings(tmp_path))
    batch = {"x": v[:, 0].copy(), "v": np.ma.masked_invalid(v)}
    with pytest.raises(DataError, match=r"^field 'v' is a masked array.*np\.ma\.getmaskarray"):
        pack(batch)
    # The way on: its data and mask as two fields.
    fields = {"v": np.ma.getdata(batch["v"]), "v_mask": np.ma.getmaskarray(batch["v"])}
    out = unpack(pack(fields))
    assert out["v_mask"].tolist() == np.isnan(v).tolist()
