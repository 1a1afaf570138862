"""Shards written by the real ``webdataset.ShardWriter`` read by ``FileSource(format="tar")``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from headrace.formats import FileSource, encode
from headrace.formats._images import decode_jpeg
from headrace.pipeline import Loader

wds = pytest.importorskip("webdataset", reason="pip install webdataset (the test extra has it)")

PER_SHARD = 7


def write(root: Path) -> dict[str, dict[str, object]]:
    rng = np.random.default_rng(0)
    written: dict[str, dict[str, object]] = {}
    with wds.ShardWriter(str(root / "train-%06d.tar"), maxcount=PER_SHARD, verbose=0) as sink:
        for i in range(20):
            sample = {
                "__key__": f"s{i:04d}",
                "jpg": encode("jpeg", rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)),
                "cls": i % 5,
                "json": {"i": i, "name": f"n{i}" * (i % 3)},  # lengths differ: ragged
                "npy": rng.standard_normal((3, 2)).astype(np.float32),
                "txt": f"héllo {i}",
            }
            written[f"s{i:04d}"] = sample
            sink.write(sample)
    return written


@pytest.mark.parametrize("shuffle", ["files", "samples", "none"])
def test_every_field_reads_back_as_webdataset_wrote_it(tmp_path: Path, shuffle: str) -> None:
    written = write(tmp_path)
    src = FileSource(tmp_path, format="tar", shuffle=shuffle)
    assert src.counts.tolist() == [7, 7, 6]
    seen = 0
    with Loader(src, batch_size=4, seed=1, steps=5) as loader:
        for b in loader:
            fields = ["cls", "index", "jpg", "json", "npy", "txt"]
            assert sorted(set(b) - {"json_shape", "txt_shape"}) == fields  # (ragged: + _shape)
            assert b["cls"].dtype == np.int64 and b["npy"].dtype == np.float32
            for j, i in enumerate(b["index"].tolist()):
                f, item = (int(x) for x in src.file_item(i))
                want = written[f"s{PER_SHARD * f + item:04d}"]
                got = decode_jpeg(want["jpg"], name="want")  # type: ignore[arg-type]
                np.testing.assert_array_equal(b["jpg"][j], got)
                assert int(b["cls"][j]) == want["cls"]
                # webdataset encodes json with json.dumps and txt as UTF-8; both stay bytes
                assert np.asarray(b["json"][j]).tobytes() == json.dumps(want["json"]).encode()
                assert json.loads(np.asarray(b["json"][j]).tobytes()) == want["json"]
                assert np.asarray(b["txt"][j]).tobytes() == str(want["txt"]).encode()
                np.testing.assert_array_equal(b["npy"][j], want["npy"])
                seen += 1
    assert seen == 20
