"""Shards listed together whose URLs spell a path another way than a listing does.

A file:// URL resolves ``.``, ``..`` and empty parts (``d/./b.bin`` opens ``d/b.bin``)
and reads alone; beside another shard of the same folder, the folder was listed and the
URL looked up among the keys as written: "no such object (not among the 2 listed)" for
a file that is there, and a sidecar looked up that way would have been taken for none.
Such URLs now open one by one, as a lone shard does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.formats import TokenSource, write_token_sidecar


@pytest.mark.parametrize("spelt", ["./b.bin", "sub/../b.bin", "/b.bin"])
def test_a_url_spelt_another_way_opens_beside_its_neighbours(tmp_path: Path, spelt: str) -> None:
    (tmp_path / "sub").mkdir()
    for name, first in [("a.bin", 0), ("b.bin", 5000)]:
        np.arange(first, first + 100, dtype=np.uint16).tofile(tmp_path / name)
        write_token_sidecar(tmp_path / name, "uint16", tokens=100)
    urls = [(tmp_path / "a.bin").as_uri(), tmp_path.as_uri() + "/" + spelt]
    src = TokenSource(urls, context=4, shuffle=False)  # each dtype from its sidecar
    assert [f.num_tokens for f in src.files] == [100, 100]
    last = src.samples_per_epoch - 1
    assert src.read(0, np.array([0, last]))["x"].tolist() == [
        [0, 1, 2, 3],
        [5092, 5093, 5094, 5095],
    ]
    src.close()
