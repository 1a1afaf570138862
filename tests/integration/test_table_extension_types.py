"""An Arrow extension type registered in this process that refuses the metadata a file
stores for it (the file written by another version of the library that registers it,
as ``datasets`` does for ``Array2D``) is refused naming the file, the type and that
metadata, in every file kind, locally and on S3 (moto on 127.0.0.1); unregistered, the
same file reads as its storage type."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.errors import FormatError
from headrace.formats import TableSource

pytestmark = pytest.mark.integration

NAME = "headrace_tests.shaped"


class _Shaped(pa.ExtensionType):
    """Its version 2 writes ``{"version": 2, "shape": [...]}``; version 1 reads only 1."""

    def __init__(self, shape: tuple[int, ...], version: int) -> None:
        self.shape, self.version = shape, version
        super().__init__(pa.list_(pa.float32(), int(np.prod(shape))), NAME)

    def __arrow_ext_serialize__(self) -> bytes:
        return json.dumps({"version": self.version, "shape": list(self.shape)}).encode()

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: Any, serialized: bytes) -> _Shaped:
        meta = json.loads(serialized)
        if meta["version"] != 1:
            raise ValueError(f"unknown version {meta['version']}: upgrade headrace_tests")
        return cls(tuple(meta["shape"]), 1)


@contextlib.contextmanager
def _reader() -> Iterator[None]:
    """Version 1 registered (the reader installed), inside only."""
    pa.register_extension_type(_Shaped((2, 3), 1))
    try:
        yield
    finally:
        pa.unregister_extension_type(NAME)


def _write(folder: Path, kind: str) -> Path:
    """A file of 40 rows of a version-2 column ``x`` and an int column ``y``."""
    pa.register_extension_type(_Shaped((2, 3), 2))
    try:
        storage = pa.array(
            np.arange(240, dtype=np.float32).reshape(40, 6).tolist(), pa.list_(pa.float32(), 6)
        )
        x = pa.ExtensionArray.from_storage(_Shaped((2, 3), 2), storage)
        t = pa.table({"x": x, "y": pa.array(np.arange(40))})
        path = folder / f"part.{'parquet' if kind == 'parquet' else 'arrow'}"
        if kind == "parquet":
            pq.write_table(t, path, row_group_size=10)
        else:
            with pa.OSFile(str(path), "wb") as f:
                new = pa.ipc.new_file if kind == "file" else pa.ipc.new_stream
                with new(f, t.schema) as w:
                    w.write_table(t, max_chunksize=10)
    finally:
        pa.unregister_extension_type(NAME)
    return path


KINDS = ["stream", "file", "parquet"]


def _refused(exc: pytest.ExceptionInfo[FormatError], where: str) -> None:
    text = str(exc.value)
    assert text.startswith(where + ":"), text
    assert "test_table_extension_types._Shaped" in text, text
    assert '{"version": 2, "shape": [2, 3]}' in text, text
    assert "ValueError: unknown version 2: upgrade headrace_tests" in text, text
    assert "another version of" in text, text


@pytest.mark.parametrize("kind", KINDS)
def test_a_refusing_extension_type_is_named_with_the_file(tmp_path: Path, kind: str) -> None:
    path = _write(tmp_path, kind)
    with _reader(), pytest.raises(FormatError) as exc:
        TableSource(str(path), columns=["y"])
    _refused(exc, str(path))


@pytest.mark.parametrize("kind", KINDS)
def test_a_refusing_extension_type_is_named_with_the_object(
    s3: S3Fixture, tmp_path: Path, kind: str
) -> None:
    path = _write(tmp_path, kind)
    key = f"ext-{kind}/{path.name}"
    s3.server.info.boto3_client().put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
    url = f"s3://{BUCKET}/{key}"
    with _reader(), pytest.raises(FormatError) as exc:
        TableSource(url, columns=["y"], store_options=options(s3))
    _refused(exc, url)


@pytest.mark.parametrize("kind", KINDS)
def test_unregistered_the_same_file_reads_as_its_storage(tmp_path: Path, kind: str) -> None:
    src = TableSource(str(_write(tmp_path, kind)), columns=["x", "y"], shuffle=False)
    got = src.read(0, np.arange(40))
    assert np.array_equal(got["x"], np.arange(240, dtype=np.float32).reshape(40, 6))
    assert np.array_equal(got["y"], np.arange(40))
    src.close()


def test_a_datasets_array_of_a_dtype_it_does_not_know(tmp_path: Path) -> None:
    # What datasets itself raises (a ValueError naming no file) for a stored dtype its
    # version does not know: named with the file and the installed version.
    datasets = pytest.importorskip("datasets")
    feats = datasets.Features({"x": datasets.Array2D((2, 3), "float32")})
    ds = datasets.Dataset.from_dict({"x": [np.zeros((2, 3), np.float32)] * 4}, features=feats)
    ds.save_to_disk(str(tmp_path / "ds"))
    (arrow,) = (tmp_path / "ds").glob("*.arrow")
    raw = arrow.read_bytes()
    assert raw.count(b'[[2, 3], "float32"]') == 1
    arrow.write_bytes(raw.replace(b'[[2, 3], "float32"]', b'[[2, 3], "floaX32"]'))
    with pytest.raises(FormatError) as exc:
        TableSource(str(tmp_path / "ds"), shapes={"x": (2, 3)})
    text = str(exc.value)
    assert text.startswith(str(arrow) + ":"), text
    assert f"registered in this process by datasets {datasets.__version__}" in text, text
    assert "floaX32" in text and "ValueError" in text, text
