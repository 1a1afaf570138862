"""A dangling symbolic link is named as one, with its target, wherever a file is
opened: a Megatron ``.idx`` or a ``.json`` sidecar linked in from a moved folder was
taken for no index ("raw token file needs a dtype"), and a link opened elsewhere was
"no such file" of a name that ``ls`` lists."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ObjectNotFoundError
from headrace.formats import open_token_file
from headrace.io import LocalFile


@pytest.mark.parametrize("beside", [".idx", ".json"])
def test_a_dangling_index_or_sidecar_link_is_named_not_taken_for_none(
    tmp_path: Path, beside: str
) -> None:
    np.arange(100, dtype=np.uint16).tofile(tmp_path / "a.bin")
    link = tmp_path / ("a" + beside if beside == ".idx" else "a.bin.json")
    os.symlink(tmp_path / "moved" / link.name, link)
    with pytest.raises(
        ObjectNotFoundError, match=r"a symbolic link to .*moved.*, which does not exist"
    ):
        open_token_file(tmp_path / "a.bin")


def test_a_dangling_link_opened_says_where_it_points(tmp_path: Path) -> None:
    os.symlink(tmp_path / "gone.bin", tmp_path / "x.bin")
    with pytest.raises(ObjectNotFoundError, match=r"x.bin: a symbolic link to .*gone.bin"):
        LocalFile(tmp_path / "x.bin")
