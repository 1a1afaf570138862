"""NPY headers, as row files and as file-dataset samples: cut, flipped and forged."""

from __future__ import annotations

from pathlib import Path

import pytest
from _harness import check
from _mutate import flips, npy_forgeries, npy_header_end, truncations
from _targets import TARGETS


@pytest.mark.parametrize("target", ["rows_npy", "files_npy", "files_npy_header"])
def test_npy(target: str, tmp_path: Path) -> None:
    data = TARGETS[target].pristine()
    end = npy_header_end(data)
    cases = truncations(data, [*range(0, end + 1, 4), end, len(data) - 2])
    cases += flips(data, seed=1, count=150, regions=[(0, end)])
    cases += npy_forgeries(data)
    seen = check(target, cases, tmp_path)
    assert seen["error:FormatError"] > len(cases) // 2


def test_shape_past_any_file(tmp_path: Path) -> None:
    # A dimension forged past 2**63: the header parsed, and counting samples from
    # headers (samples_per_file="header") raised OverflowError summing the counts.
    import numpy as np

    from headrace.errors import FormatError
    from headrace.formats import FileSource, decode_npy, encode_npy

    data = encode_npy(np.zeros((3, 4), dtype=np.float32))
    head_end = data.index(b"\n") + 1
    text = data[:head_end].replace(b"(3, 4), }", b"(99999999999999999999, 4), }")
    text = text[:-1].rstrip(b" ").ljust(head_end - 1) + b"\n"
    forged = text + data[head_end:]
    for f in ["a.npy", "b.npy"]:
        (tmp_path / f).write_bytes(forged if f == "a.npy" else data)
    message = r"a\.npy: corrupt NPY header: shape \(99999999999999999999, 4\) of float32: its"
    with pytest.raises(FormatError, match=message):
        FileSource(tmp_path, format="npy", samples_per_file="header")
    with pytest.raises(FormatError, match=message):
        decode_npy(forged, name="a.npy")
