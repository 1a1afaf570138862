"""Image columns (datasets' ``Image()`` feature) of Parquet files and a ``save_to_disk``
folder on a real S3 endpoint (moto): the local files' batches, bit for bit, with the
same fingerprint, on 1 and 2 hosts, after a resume and in a pickled (worker) copy; a
corrupt image names its object, row and column."""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from PIL import Image
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.errors import FormatError
from headrace.formats import TableSource
from headrace.formats._arrow_remote import RemoteArrow
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

datasets = pytest.importorskip("datasets", reason="datasets is a test extra")

pytestmark = pytest.mark.integration

URL = f"s3://{BUCKET}/images"
N = 60
# Local Arrow files default to a full shuffle, tables on S3 to windows: the same here.
KW: dict[str, Any] = {"window_rows": 20, "image_mode": "RGB", "shuffle": "window"}


def _blobs(corrupt: int | None = None) -> list[bytes]:
    rng = np.random.default_rng(5)
    out = []
    for i in range(N):
        h, w = 10 + 4 * (i % 3), 14 + 2 * (i % 3)
        a = rng.integers(0, 256, (h, w, 1 if i % 4 == 1 else 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(a[:, :, 0] if a.shape[2] == 1 else a).save(
            buf, "PNG" if i % 4 == 1 else "JPEG"
        )
        out.append(buf.getvalue())
    if corrupt is not None:
        out[corrupt] = out[corrupt][:-40]
    return out


def _dataset(blobs: list[bytes]) -> Any:
    classes = datasets.ClassLabel(names=[f"class {i}" for i in range(N)])
    features = datasets.Features({"image": datasets.Image(), "label": classes})
    rows = {"image": [{"bytes": b, "path": None} for b in blobs], "label": list(range(N))}
    return datasets.Dataset.from_dict(rows, features=features)


def _put(s3: S3Fixture, key: str, body: bytes) -> None:
    s3.server.info.boto3_client().put_object(Bucket=BUCKET, Key=f"images/{key}", Body=body)


@pytest.fixture(scope="module")
def root(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pq/`` (to_parquet, 3 files) and ``hf/`` (save_to_disk, 3 shards), local and on S3."""
    root = tmp_path_factory.mktemp("images")
    ds = _dataset(_blobs())
    (root / "pq").mkdir()
    for i in range(3):
        ds.shard(3, i, contiguous=True).to_parquet(str(root / "pq" / f"train-{i}.parquet"))
    ds.save_to_disk(str(root / "hf"), num_shards=3)
    for sub in ("pq", "hf"):
        for f in sorted((root / sub).iterdir()):
            _put(s3, f"{sub}/{f.name}", f.read_bytes())
    _dataset(_blobs(corrupt=44)).to_parquet(str(root / "bad.parquet"))
    _put(s3, "bad/train.parquet", (root / "bad.parquet").read_bytes())
    return root


def _digests(make: Any, world: int) -> list[str]:
    return [
        batch_digest(Loader(make(), batch_size=6, seed=4, steps=15, rank=r, world_size=world))
        for r in range(world)
    ]


@pytest.mark.parametrize("sub", ["pq", "hf"])
def test_s3_gives_the_local_image_batches(s3: S3Fixture, root: Path, sub: str) -> None:
    local = lambda: TableSource(root / sub, **KW)  # noqa: E731
    remote = lambda: TableSource(f"{URL}/{sub}/", store_options=options(s3), **KW)  # noqa: E731
    for world in (1, 2):
        assert _digests(remote, world) == _digests(local, world), world
    a, b = local(), remote()
    assert b.table.remote and b.images == a.images == ["image"]
    # The class names from the footer's (the IPC schema's) datasets metadata.
    assert b.classes == a.classes == {"label": tuple(f"class {i}" for i in range(N))}
    assert a.fingerprint() == b.fingerprint()
    # Grey PNGs (rows 1, 5, ...) as RGB, three sizes in turn.
    plain = TableSource(f"{URL}/{sub}/", store_options=options(s3), shuffle=False, image_mode="RGB")
    got = plain.read(0, np.arange(3, dtype=np.int64))
    plain.close()
    assert got["image_shape"].tolist() == [[10, 14, 3], [14, 16, 3], [18, 18, 3]]
    copy = pickle.loads(pickle.dumps(b))
    with Loader(copy, batch_size=6, seed=4, steps=15) as ld:
        assert batch_digest(ld) == _digests(local, 1)[0]
    for s in (a, b, copy):
        s.close()
    assert_resume_exact(
        lambda: Loader(remote(), batch_size=6, seed=4, steps=15), steps=15, resume_at=[0, 7]
    )


def test_a_corrupt_image_on_s3_names_object_row_and_column(s3: S3Fixture, root: Path) -> None:
    src = TableSource(f"{URL}/bad/train.parquet", store_options=options(s3), shuffle=False)
    src.read(0, np.arange(40, dtype=np.int64))
    with pytest.raises(
        FormatError, match=rf"{URL}/bad/train\.parquet: column 'image', row 44 \(sample 44\)"
    ):
        src.read(0, np.arange(40, 50, dtype=np.int64))
    src.close()


def test_null_checks_at_open_read_headers_only_and_name_a_path(
    s3: S3Fixture, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fetched: list[int] = []
    span = RemoteArrow.span

    def counted(self: RemoteArrow, i: int, *a: Any, **kw: Any) -> Any:
        fetched.append(i)
        return span(self, i, *a, **kw)

    monkeypatch.setattr(RemoteArrow, "span", counted)
    TableSource(f"{URL}/hf/", store_options=options(s3)).close()
    assert fetched == []  # no null in the image struct nor its bytes: no body fetched
    blobs: list[bytes | None] = list(_blobs())
    blobs[33] = None
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    rows = [{"bytes": b, "path": None if b else "pics/33.png"} for b in blobs]
    table = pa.table({"image": pa.array(rows, image), "label": np.arange(N)})
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as w:
        w.write_table(table, max_chunksize=20)
    _put(s3, "pathonly/data.arrow", sink.getvalue().to_pybytes())
    with pytest.raises(
        FormatError,
        match=rf"{URL}/pathonly/data\.arrow: column 'image': row 33 holds no bytes, only a "
        r"path \('pics/33.png'\)",
    ):
        TableSource(f"{URL}/pathonly/data.arrow", store_options=options(s3), images=["image"])
    assert fetched == [1]  # the record batch whose header counts a null, alone


def test_check_counts_the_classes_of_a_table_on_s3(
    s3: S3Fixture, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The class-label column read a column at a time, from the objects as from the files.
    from headrace.cli import main

    info = s3.server.info
    opts = [f"endpoint={info.endpoint}", f"region={info.region}", "path_style=true"]
    opts += [f"access_key_id={info.access_key_id}", f"secret_access_key={info.secret_access_key}"]
    flags = [x for o in opts for x in ("--store-option", o)]
    want = f"column 'label': {N} classes, samples of each: class 0 1, class 1 1"
    for data in (f"{URL}/pq/", str(root / "pq")):
        out = root / "check.json"
        args = ["check", data, "--format", "table", "--columns", "label", "--json", str(out)]
        assert main([*args, *(flags if data.startswith("s3") else [])]) == 0
        assert want in capsys.readouterr().out
        got = json.loads(out.read_text())["column_classes"]["label"]
        assert got == {f"class {i}": 1 for i in range(N)}
