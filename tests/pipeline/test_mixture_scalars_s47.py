"""A mixture of file sources whose scalar field differs in dtype between them (an NPZ
``label`` of int32 in one, int64 in the other): a step whose samples all agree was given
per sample, as NumPy scalars the loader never stacked again (an ``object`` batch with a
``label_shape`` of no columns), where a batch of one source's files alone is stacked."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from headrace.formats import FileSource
from headrace.pipeline import Loader, Mixture


def test_steps_of_agreeing_scalars_are_stacked(tmp_path: Path) -> None:
    for name, dtype, base in (("a", np.int32, 0), ("b", np.int64, 100)):
        (tmp_path / name).mkdir()
        for i in range(8):
            np.savez(tmp_path / name / f"{i}.npz", label=np.array(base + i, dtype))
    sources = {k: FileSource(str(tmp_path / k / "*.npz"), format="npz") for k in "ab"}
    one_source = 0
    with Loader(Mixture(sources, [0.9, 0.1], batch_size=4), batch_size=4, steps=8) as ld:
        for batch in ld:
            label, source = batch["label"], batch["source"]
            if (source == source[0]).all():
                one_source += 1
                assert label.dtype == (np.int32 if source[0] == 0 else np.int64)
                assert "label_shape" not in batch
            else:
                assert label.dtype == object and batch["label_shape"].shape == (4, 0)
                assert all(isinstance(e, np.ndarray) and e.shape == () for e in label)
            values = [int(e) for e in label]
            assert all((v >= 100) == (s == 1) for v, s in zip(values, source, strict=True))
    assert one_source >= 3
