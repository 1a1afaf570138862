"""PairRows edges (s48): how members are named and what ``dtype=`` the outputs take."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from headrace.errors import ConfigError
from headrace.formats import PairRows, write_row_file
from headrace.testing import batch_digest

N = 24


def files(root: Path) -> dict[str, Path]:
    rng = np.random.default_rng(48)
    out = {}
    for name, w, dt in (("anchor", 5, ">u2"), ("positive", 9, np.uint32)):
        tok = rng.integers(1, 1000, (N, w)).astype(dt)
        write_row_file(root / f"{name}.npy", tok)
        out[name] = root / f"{name}.npy"
    return out


def test_member_names_that_would_share_an_output_key_are_refused(tmp_path: Path) -> None:
    f = files(tmp_path)
    # {1: ...} and {"1": ...} both make "1_x": one member's rows were silently lost.
    with pytest.raises(ConfigError, match=r"member names must be non-empty strings.*got 1"):
        PairRows({1: f["anchor"], "1": f["positive"]})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match=r"member names must be non-empty strings.*got ''"):
        PairRows({"": f["anchor"]})


def test_members_given_as_a_list_of_pairs_are_refused_saying_what_to_pass(
    tmp_path: Path,
) -> None:
    f = files(tmp_path)
    with pytest.raises(ConfigError, match=r"members must be a mapping .*\(got a list\)"):
        PairRows([("anchor", f["anchor"]), ("positive", f["positive"])])  # type: ignore[arg-type]


def test_a_big_endian_dtype_gives_native_outputs_torch_takes(tmp_path: Path) -> None:
    f = files(tmp_path)
    samples = np.arange(30, dtype=np.int64)
    native = PairRows(f, dtype=np.int64)
    given = PairRows(f, dtype=">i8")
    got = given.read(3, samples)
    assert got["anchor_x"].dtype.isnative and got["positive_x"].dtype == np.int64
    torch.from_numpy(got["anchor_x"])  # refused another byte order
    assert batch_digest([got]) == batch_digest([native.read(3, samples)])
    assert given.fingerprint() == native.fingerprint()
    native.close()
    given.close()


def test_an_unknown_dtype_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"dtype 'int65' is not a NumPy dtype"):
        PairRows(files(tmp_path), dtype="int65")
