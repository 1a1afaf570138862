"""TokenSource's sizes and switches, checked where they are given.

``window_bytes=256e6`` (a float, as sizes are often written) was an ``IndexError`` from
deep inside the plan ("arrays used as indices must be of integer type"), and
``block_bytes=8192.0`` a ``TypeError`` at the first read; ``max_windows=1.5`` and
``read_ahead="no"`` (a true string) were taken. Each is refused by name; NumPy integers
still pass.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.formats import TokenSource


@pytest.fixture
def path(tmp_path: Path) -> Path:
    p = tmp_path / "a.bin"
    np.arange(1000, dtype=np.uint16).tofile(p)
    return p


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"window_bytes": 256e6}, r"window_bytes must be an integer \(got 256000000\.0, a float"),
        ({"window_bytes": "4096"}, r"window_bytes must be an integer"),
        ({"block_bytes": 8192.0}, r"block_bytes must be an integer"),
        ({"max_windows": 1.5}, r"max_windows must be an integer"),
        ({"max_windows": True}, r"max_windows must be an integer \(got True"),
        ({"read_ahead": "no"}, r"read_ahead must be True or False \(got 'no'\)"),
    ],
)
def test_a_size_or_switch_of_another_type_is_refused_by_name(
    path: Path, kw: dict[str, object], said: str
) -> None:
    with pytest.raises(ConfigError, match=said):
        TokenSource(path, context=8, dtype="uint16", **kw)  # type: ignore[arg-type]


def test_numpy_integers_pass(path: Path) -> None:
    src = TokenSource(
        path,
        context=8,
        dtype="uint16",
        window_bytes=np.int64(4096),
        block_bytes=np.int64(4096),
        max_windows=np.int32(1),
        read_ahead=np.bool_(False),  # type: ignore[arg-type]
        shuffle=False,
    )
    assert src.read(0, np.arange(1))["x"].tolist() == [[0, 1, 2, 3, 4, 5, 6, 7]]
    src.close()
