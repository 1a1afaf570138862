"""Megatron ``.idx`` files and the JSON sidecars of raw token and row files."""

from __future__ import annotations

from pathlib import Path

import pytest
from _harness import check
from _mutate import (
    BAD_JSON_VALUES,
    MEGATRON_HEADER,
    Case,
    flips,
    forge,
    forge_fields,
    json_cases,
    truncations,
)
from _targets import TARGETS


def test_megatron_index(tmp_path: Path) -> None:
    data = TARGETS["megatron_idx"].pristine()
    cases = truncations(data, range(0, len(data), 2))
    cases += forge(data, 17, "B", range(256), name="dtype_code")
    cases += forge_fields(data, MEGATRON_HEADER)
    cases += flips(data, seed=3, count=150)
    seen = check("megatron_idx", cases, tmp_path)
    assert seen["error:FormatError"] > len(cases) // 2


#: Texts that are not a dtype a sidecar may give, beside the shared bad JSON values.
_DTYPE_TEXTS = ["uint16\x00", "S0", "O", "V2", "(2,)u2", "2u2", "<U3", "float128", "M8[s]"]


def _sidecars(pristine: bytes) -> list[Case]:
    cases = json_cases(pristine, [*BAD_JSON_VALUES, *_DTYPE_TEXTS])
    cases.append(Case(label="bom", data=b"\xef\xbb\xbf" + pristine, strict=False))
    return cases + truncations(pristine) + flips(pristine, seed=4, count=100)


@pytest.mark.parametrize("target", ["token_sidecar", "rows_sidecar"])
def test_sidecars(target: str, tmp_path: Path) -> None:
    pristine = TARGETS[target].pristine()
    cases = _sidecars(pristine)
    seen = check(target, cases, tmp_path)
    assert seen["error:FormatError"] > len(cases) // 2


def test_sidecar_regressions(tmp_path: Path) -> None:
    # Minimal cases the fuzzing found, each a bare Python error or an error that named
    # only the data file for a fault of its sidecar.
    import numpy as np

    from headrace.errors import DataError, FormatError
    from headrace.formats import PaddedRows, TokenSource, write_row_file

    np.arange(100, dtype=np.uint16).tofile(tmp_path / "t.bin")
    (tmp_path / "t.bin.json").write_text("[" * 100_000)  # RecursionError in json.loads
    with pytest.raises(FormatError, match=r"t\.bin\.json: unreadable token sidecar"):
        TokenSource(tmp_path / "t.bin", context=8)
    write_row_file(tmp_path / "r.bin", np.ones((4, 9), dtype=np.uint16))
    side = tmp_path / "r.bin.json"
    for text, error, message in [
        ("[" * 100_000, FormatError, r"r\.bin\.json: unreadable row sidecar"),
        # itemsize 0: a ZeroDivisionError sizing the rows
        ('{"dtype": "S0", "width": 9}', FormatError, r"r\.bin\.json: dtype 'S0' .*0 bytes"),
        ('{"dtype": "5i2", "width": 9}', FormatError, r"r\.bin\.json: dtype '5i2' .*an array"),
        ('{"dtype": "V2", "width": 9}', FormatError, r"r\.bin\.json: dtype 'V2' .*not a dtype"),
        ('{"dtype": "O", "width": 9}', FormatError, r"r\.bin\.json: dtype 'O' .*not a dtype"),
        ('{"dtype": "uint16", "width": 29}', DataError, r"\(29 x uint16, width and dtype from "),
        ('{"dtype": "<U3", "width": 9}', FormatError, r"r\.bin\.json: dtype '<U3'"),
    ]:
        side.write_text(text)
        with pytest.raises(error, match=message):
            PaddedRows(tmp_path / "r.bin", context=8)
