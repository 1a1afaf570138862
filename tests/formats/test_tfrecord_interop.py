"""Examples written by the ``tfrecord`` package's writer read by ``format="tfrecord"``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.formats import FileSource
from headrace.pipeline import Loader

tfrecord = pytest.importorskip("tfrecord", reason="pip install tfrecord (the test extra has it)")


@pytest.mark.parametrize("shuffle", ["files", "samples"])
def test_examples_read_back_as_the_tfrecord_package_wrote_them(
    tmp_path: Path, shuffle: str
) -> None:
    rng = np.random.default_rng(0)
    written = []
    for k in range(2):
        writer = tfrecord.TFRecordWriter(str(tmp_path / f"train-{k}.tfrecord"))
        for i in range(6):
            sample = {
                "image": (rng.bytes(16 + k), "byte"),
                "label": (10 * k + i, "int"),
                "x": (rng.standard_normal(3).astype(np.float32).tolist(), "float"),
            }
            written.append(sample)
            writer.write(sample)
        writer.close()
    src = FileSource(tmp_path, format="tfrecord", shuffle=shuffle)
    assert src.counts.tolist() == [6, 6]
    seen = 0
    with Loader(src, batch_size=4, seed=2, steps=3) as loader:
        for b in loader:
            assert b["label"].dtype == np.int64 and b["x"].dtype == np.float32
            for j, i in enumerate(b["index"].tolist()):
                f, item = (int(x) for x in src.file_item(i))
                want = written[6 * f + item]
                assert np.asarray(b["image"][j]).tobytes() == want["image"][0]
                assert np.asarray(b["label"][j]).tolist() == [want["label"][0]]
                np.testing.assert_array_equal(b["x"][j], np.float32(want["x"][0]))
                seen += 1
    assert seen == 12
