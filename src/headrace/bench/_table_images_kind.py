"""Image table workload (``table-images`` kind): JPEGs in a Hugging Face ``Image()`` column.

The dataset is ``files`` Parquet files of ``rows`` rows in all, as ``datasets``
writes an image dataset (``to_parquet``, ``push_to_hub``): ``image`` a
``struct<bytes: binary, path: string>`` of JPEGs of ``image_hw`` (quality
``quality``, noise ``noise``: ~300 KB at 640x640, see
:func:`~headrace.bench._files_kind.photo`), ``label`` ``int64``, the
``huggingface`` schema metadata naming the column ``Image``, row groups of
``group_rows`` (``datasets`` writes 100 for image datasets). Every variant
follows :class:`~headrace.formats.TableSource`'s windowed plan (windows of
``window_rows`` rows, as the ``parquet`` kind's):

``naive``         what a training script does today: ``pq.ParquetFile`` per file
                  (``pyarrow.fs.S3FileSystem`` on S3), row groups read as a batch
                  first needs them into a cache of one window's groups, each row
                  taken as Python objects (``datasets``' ``dataset[i]``), its bytes
                  opened with PIL and converted to RGB, one sample at a time.
``headrace``      ``TableSource`` through the ``Loader``: the image column decoded
                  on ``decode_threads`` threads, read ahead (on S3, a batch's
                  column chunks fetched together).
``headrace-raw``  the same with ``images=[]``: each image's stored bytes, padded to
                  the longest (``image`` ``(B, longest)`` uint8 with ``image_mask``).

``naive`` and ``headrace`` deliver ``image`` ``(B, H, W, 3)`` uint8 and ``label``:
their digests must agree. A sample's payload is its decoded image and label
(``H * W * 3 + 8`` bytes, the raw variant's too); bytes read are the row groups'
stored bytes as each variant fetched or decoded them. Local, or S3 with
``--storage s3``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from headrace.bench._datagen import written_whole
from headrace.bench._files_kind import photo
from headrace.bench._kind import Batch, Stream, VariantSpec, variant
from headrace.bench._parquet_kind import ParquetKind, loader_stream, naive_stream
from headrace.bench._workload import refuse
from headrace.errors import ConfigError
from headrace.formats import TableSource, encode_jpeg
from headrace.formats._file_decode import default_decode_threads

__all__ = ["TableImagesKind"]

#: The schema metadata ``datasets`` writes for these features (what makes ``image``
#: an ``Image()`` column to it, and to TableSource's default ``images``).
_HF_FEATURES = {
    "info": {
        "features": {
            "image": {"_type": "Image"},
            "label": {"dtype": "int64", "_type": "Value"},
        }
    }
}


class TableImagesKind(ParquetKind):
    """``files`` Parquet files of JPEGs in an ``Image()`` column (see the module doc)."""

    extras: ClassVar[tuple[tuple[str, str], ...]] = (("pyarrow", "arrow"), ("PIL", "images"))

    padded = False

    def __init__(self, workload: Any, root: str) -> None:
        ds, rd = workload.dataset, workload.reader
        refuse(ds, "width", "rows hold one image each, of image_hw")
        # Before the parquet kind's settings: the dataset's folder (its Storage) names them.
        self.image_hw = ds.pair("image_hw", (640, 640), least=None)  # its range: below
        self.noise = ds.count("noise", 80, least=0)  # a whole number (int() read 2.5 as 2)
        self.quality = ds.count("quality", 90, least=None)  # its range: below
        self.decode_threads = rd.count("decode_threads", default_decode_threads(), least=0)
        if min(self.image_hw) < 1 or not 1 <= self.quality <= 100:
            raise ConfigError(
                f"workload {workload.name!r}: image_hw must be >= 1 and quality in 1..100 "
                f"(got {list(self.image_hw)}, {self.quality})"
            )
        super().__init__(workload, root)

    # -- dataset ----------------------------------------------------------------
    @property
    def folder(self) -> str:
        seed = self.workload.train.seed
        h, w = self.image_hw
        shape = (
            f"{self.rows}x{h}x{w}-q{self.quality}-n{self.noise}-f{self.num_files}"
            f"-g{self.group_rows}-s{seed}"
        )
        return os.path.join(self.root, f"table-images-{shape}")

    def generate(self, progress: Callable[[int, int], None] | None = None) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        os.makedirs(self.folder, exist_ok=True)
        seed = self.workload.train.seed
        struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
        first = 0
        for i, (path, n) in enumerate(zip(self.files(), self._file_rows(), strict=True)):
            if not os.path.exists(path):  # written under a temporary name, then renamed
                images = [
                    {
                        "bytes": encode_jpeg(
                            photo(self._image_seed(seed, r), (*self.image_hw, 3), self.noise),
                            quality=self.quality,
                        ),
                        # as an imagefolder pushed to the Hub keeps its file names
                        "path": f"{r:08d}.jpg",
                    }
                    for r in range(first, first + n)
                ]
                table = pa.table(
                    {
                        "image": pa.array(images, struct),
                        "label": np.arange(first, first + n, dtype=np.int64),
                    }
                ).replace_schema_metadata({"huggingface": json.dumps(_HF_FEATURES)})
                with written_whole(path) as tmp:
                    pq.write_table(table, tmp, row_group_size=self.group_rows)
            first += n
            if progress:
                progress(i + 1, self.num_files)

    def bytes_to_write(self) -> int:
        rows = [
            n for p, n in zip(self.files(), self._file_rows(), strict=True) if not os.path.exists(p)
        ]
        if not rows:
            return 0
        # Every image has the same shape and noise: one encoded is the others' size.
        seed = self.workload.train.seed
        jpeg = encode_jpeg(
            photo(self._image_seed(seed, 0), (*self.image_hw, 3), self.noise), quality=self.quality
        )
        # each row: the JPEG, its 12-byte path, offsets and the int64 label; then footers
        return sum(n * (len(jpeg) + 12 + 8 + 8) + 65536 for n in rows)

    @staticmethod
    def _image_seed(seed: int, row: int) -> int:
        return int(np.random.SeedSequence([seed, row]).generate_state(1)[0])

    def record_bytes(self) -> float:
        # The decoded RGB image and the int64 label.
        h, w = self.image_hw
        return float(h * w * 3 + 8)

    def payload_counts(self) -> str:
        h, w = self.image_hw
        return (
            f"each sample's decoded image and label ({h}x{w}x3 + 8 B), for every variant: "
            "headrace-raw delivers the stored JPEG bytes (padded) and is counted so too"
        )

    def batch_payload_bytes(self, batch: Batch) -> int | None:
        # The raw variant's padded bytes do not show the decoded payload a sample counts.
        if batch["image"].ndim != 4:
            return None
        return sum(a.nbytes for k, a in batch.items() if k != "index")

    @cached_property
    def longest(self) -> int:
        """Bytes of the longest stored image: the raw variant's padded width."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        most = 0
        for path in self.files():
            col = pq.read_table(path, columns=["image"]).column("image")
            most = max(most, int(pc.max(pc.binary_length(pc.struct_field(col, "bytes"))).as_py()))
        return most

    # -- storage ----------------------------------------------------------------
    def source(self) -> TableSource:
        return self.open_source(columns=["image", "label"], decode_threads=self.decode_threads)


@variant(TableImagesKind, "naive")
def _naive(k: TableImagesKind, spec: VariantSpec, steps: int) -> Stream:
    import io

    from PIL import Image

    def batch_of(rows: list[Any]) -> Batch:
        images, labels = [], []
        for one in rows:
            # dataset[i]: the row as Python objects, then Image().decode_example's PIL.
            row = one.to_pylist()[0]
            with Image.open(io.BytesIO(row["image"]["bytes"])) as img:
                images.append(np.asarray(img.convert("RGB")))
            labels.append(row["label"])
        return {"image": np.stack(images), "label": np.array(labels, dtype=np.int64)}

    return naive_stream(k, spec, steps, ["image", "label"], batch_of)


@variant(TableImagesKind, "headrace")
def _headrace(k: TableImagesKind, spec: VariantSpec, steps: int) -> Stream:
    return loader_stream(k, spec, steps, k.source())


@variant(TableImagesKind, "headrace-raw", group="raw")
def _headrace_raw(k: TableImagesKind, spec: VariantSpec, steps: int) -> Stream:
    src = k.open_source(columns=["image", "label"], images=[], width=k.longest)
    return loader_stream(k, spec, steps, src)
