"""Struct columns read by field, and image columns (datasets' ``Image()`` feature, or
binary columns named in ``images=``) decoded at batch time as FileSource decodes files:
values equal to Pillow's, the same batch layout, errors naming file, row and column."""

from __future__ import annotations

import io
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from PIL import Image

from headrace._shm_ring import RingConfig, WorkerBatches
from headrace.errors import ConfigError, FormatError
from headrace.formats import Ragged, Table, TableSource
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest
from headrace.transforms import RandomCrop

datasets = pytest.importorskip("datasets", reason="datasets is a test extra")

N = 24
IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _encode(a: np.ndarray[Any, Any], fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a[:, :, 0] if a.shape[2] == 1 else a).save(buf, fmt)
    return buf.getvalue()


def images(n: int = N, *, sizes: int = 3, kinds: tuple[str, ...] = ("jpeg",)) -> list[bytes]:
    """``n`` encoded images, ``sizes`` sizes in turn, of ``kinds`` in turn: ``jpeg``
    (RGB), ``grey`` (PNG L), ``rgba`` (PNG RGBA)."""
    rng = np.random.default_rng(11)
    out = []
    for i in range(n):
        h, w = 12 + 5 * (i % sizes), 16 + 3 * (i % sizes)
        kind = kinds[i % len(kinds)]
        channels = {"jpeg": 3, "grey": 1, "rgba": 4}[kind]
        a = rng.integers(0, 256, (h, w, channels), dtype=np.uint8)
        out.append(_encode(a, "JPEG" if kind == "jpeg" else "PNG"))
    return out


def pillow(data: bytes, mode: str | None = None) -> np.ndarray[Any, Any]:
    img = Image.open(io.BytesIO(data))
    a = np.asarray(img if mode is None else img.convert(mode))
    return a[:, :, None] if a.ndim == 2 else a


def struct_table(blobs: list[bytes | None], paths: list[str | None] | None = None) -> pa.Table:
    paths = paths or [None] * len(blobs)
    rows = [{"bytes": b, "path": p} for b, p in zip(blobs, paths, strict=True)]
    return pa.table({"image": pa.array(rows, IMAGE), "label": np.arange(len(blobs))})


def write(table: pa.Table, path: Path) -> Path:
    if path.suffix == ".parquet":
        pq.write_table(table, path, row_group_size=10)
    else:
        with ipc.new_stream(path, table.schema) as w:
            w.write_table(table, max_chunksize=10)
    return path


def hf_dataset(blobs: list[bytes]) -> Any:
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    rows = {"image": [{"bytes": b, "path": None} for b in blobs], "label": list(range(len(blobs)))}
    return datasets.Dataset.from_dict(rows, features=features)


@pytest.fixture(params=["saved", "parquet"])
def hf_path(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A datasets Image() dataset of mixed sizes: save_to_disk, or to_parquet."""
    ds = hf_dataset(images())
    if request.param == "saved":
        ds.save_to_disk(str(tmp_path / "saved"), max_shard_size="20KB")
        return tmp_path / "saved"
    ds.to_parquet(str(tmp_path / "t.parquet"))
    return tmp_path / "t.parquet"


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_struct_fields_read_by_name(tmp_path: Path, suffix: str) -> None:
    blobs = images()
    t = struct_table(list(blobs), [f"img/{i}.jpg" for i in range(N)])
    path = write(t, tmp_path / f"t{suffix}")
    rows = np.array([5, 0, 23, 11])
    with Table.open(path, columns=["image.bytes", "image.path", "label", "image"]) as tb:
        got = tb.read_rows(rows)
        assert tb.columns["image.path"].kind == "bytes"
        assert str(tb.schema.field("image.bytes").type) == "binary"
    for key in ("image.bytes", "image"):  # an Image struct by its name: its bytes
        v = got[key]
        assert isinstance(v, Ragged)
        assert v.values.dtype == np.uint8
        assert [bytes(v.row(i)) for i in range(4)] == [blobs[r] for r in rows]
    paths = got["image.path"]
    assert isinstance(paths, Ragged)
    assert [bytes(paths.row(i)).decode() for i in range(4)] == [f"img/{r}.jpg" for r in rows]
    assert got["label"].tolist() == rows.tolist()
    with pytest.raises(
        ConfigError,
        match=rf"t\{suffix}: column 'image.nope': struct 'image' has no field 'nope'; its "
        r"fields: \['image.bytes', 'image.path'\]",
    ):
        Table.open(path, columns=["image.nope"])
    with pytest.raises(ConfigError, match=r"'label' is int64, not a struct; it has no field 'x'"):
        Table.open(path, columns=["label.x"])
    with pytest.raises(ConfigError, match=r"no column\(s\) \['nope.bytes'\]; available"):
        Table.open(path, columns=["nope.bytes"])


def test_a_struct_without_bytes_is_refused_naming_its_fields(tmp_path: Path) -> None:
    t = pa.table({"meta": pa.array([{"a": i, "b": float(i)} for i in range(N)])})
    path = write(t, tmp_path / "m.parquet")
    with pytest.raises(
        FormatError, match=r"column 'meta' has type struct.*columns=\['meta.a', 'meta.b'\]"
    ):
        Table.open(path)
    with Table.open(path, columns=["meta.b", "meta.a"]) as tb:
        got = tb.read_rows([3, 7])
    assert got["meta.a"].tolist() == [3, 7] and got["meta.b"].tolist() == [3.0, 7.0]


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_null_bytes_are_refused_and_a_path_alone_is_named(tmp_path: Path, suffix: str) -> None:
    blobs: list[bytes | None] = list(images())
    blobs[13] = None
    path = write(struct_table(blobs), tmp_path / f"n{suffix}")
    with pytest.raises(FormatError, match=rf"n\{suffix}: column 'image': row 13 is null"):
        TableSource(path)
    blobs[13], blobs[17] = images()[13], None
    paths: list[str | None] = [None] * N
    paths[17] = "photos/17.jpg"
    path = write(struct_table(blobs, paths), tmp_path / f"p{suffix}")
    with pytest.raises(
        FormatError,
        match=rf"p\{suffix}: column 'image': row 17 holds no bytes, only a path "
        r"\('photos/17.jpg'\); headrace reads images stored in the table and does not fetch",
    ):
        TableSource(path)
    null_struct = pa.table({"image": pa.array([{"bytes": b"x", "path": None}, None], IMAGE)})
    path = write(null_struct, tmp_path / f"s{suffix}")
    with pytest.raises(FormatError, match=r"column 'image.bytes': row 1 is null"):
        TableSource(path, columns=["image.bytes"], width=4)


def test_datasets_image_feature_is_decoded_as_pillow_decodes_it(hf_path: Path) -> None:
    blobs = images()
    src = TableSource(hf_path, shuffle=False)
    assert src.images == ["image"]
    assert src.table.image_columns == ["image"]
    got = src.read(0, np.arange(6, dtype=np.int64))
    assert got["image"].dtype == object  # three sizes: per-row arrays and their shapes
    assert got["image_shape"].tolist() == [list(pillow(blobs[i]).shape) for i in range(6)]
    for i in range(6):
        np.testing.assert_array_equal(got["image"][i], pillow(blobs[i]))
    assert got["label"].tolist() == list(range(6))
    same = src.read(0, np.array([0, 3, 6, 9], dtype=np.int64))  # one size: stacked
    assert same["image"].shape == (4, 12, 16, 3) and "image_shape" not in same
    np.testing.assert_array_equal(same["image"][2], pillow(blobs[6]))
    src.close()
    raw = TableSource(hf_path, images=[], width=4096, shuffle=False)  # the bytes, padded
    v = raw.read(0, np.array([2], dtype=np.int64))
    assert bytes(v["image"][0][: len(blobs[2])]) == blobs[2]
    assert "image" not in raw.fingerprint().get("images", [])
    raw.close()


def test_image_decode_false_and_odd_metadata_leave_the_bytes(tmp_path: Path) -> None:
    ds = hf_dataset(images(4)).cast_column("image", datasets.Image(decode=False))
    ds.to_parquet(str(tmp_path / "raw.parquet"))
    src = TableSource(tmp_path / "raw.parquet", width=4096)
    assert src.images == [] and src.read(0, np.arange(2))["image"].shape == (2, 4096)
    for meta in (b"not json", b'{"info": {"features": []}}', b"{}"):
        t = struct_table(list(images(4))).replace_schema_metadata({"huggingface": meta})
        pq.write_table(t, tmp_path / "odd.parquet")
        assert Table.open(tmp_path / "odd.parquet").image_columns == []


def test_image_mode_converts_grey_and_rgba_as_pillow_does(tmp_path: Path) -> None:
    blobs = images(12, sizes=1, kinds=("jpeg", "grey", "rgba"))
    path = write(struct_table(list(blobs)), tmp_path / "m.parquet")
    as_stored = TableSource(path, images=["image"], shuffle=False)
    got = as_stored.read(0, np.arange(3, dtype=np.int64))
    assert [a.shape[2] for a in got["image"]] == [3, 1, 4]  # channels differ: ragged
    for i in range(3):
        np.testing.assert_array_equal(got["image"][i], pillow(blobs[i]))
    for mode, channels in (("RGB", 3), ("L", 1), ("RGBA", 4), ("LA", 2)):
        src = TableSource(path, images=["image"], image_mode=mode, shuffle=False)  # type: ignore[arg-type]
        got = src.read(0, np.arange(12, dtype=np.int64))
        assert got["image"].shape == (12, 12, 16, channels), mode
        for i in range(12):
            np.testing.assert_array_equal(got["image"][i], pillow(blobs[i], mode))
        assert src.fingerprint()["image_mode"] == mode
        src.close()


def test_a_binary_column_named_in_images_is_decoded(tmp_path: Path) -> None:
    blobs = images(10, sizes=1)
    pq.write_table(pa.table({"jpg": pa.array(blobs, pa.large_binary())}), tmp_path / "b.parquet")
    src = TableSource(tmp_path / "b.parquet", images=["jpg"], decode_threads=0, shuffle=False)
    got = src.read(0, np.array([4, 1], dtype=np.int64))
    np.testing.assert_array_equal(got["jpg"], np.stack([pillow(blobs[4]), pillow(blobs[1])]))
    # A struct without datasets' metadata: decoded only when asked.
    path = write(struct_table(list(blobs)), tmp_path / "s.arrow")
    assert TableSource(path, width=8192).images == []
    assert TableSource(path, images=["image"]).read(0, np.arange(2))["image"].shape[0] == 2


def test_bad_image_options_are_refused(tmp_path: Path) -> None:
    path = write(struct_table(list(images())), tmp_path / "t.parquet")
    with pytest.raises(ConfigError, match=r"images names column 'label' of type int64"):
        TableSource(path, images=["label"])
    with pytest.raises(ConfigError, match=r"images names column 'image.path' of type string"):
        TableSource(path, columns=["image.path"], images=["image.path"])
    with pytest.raises(ConfigError, match=r"images names column\(s\) \['pic'\] that are not read"):
        TableSource(path, images=["pic"])
    with pytest.raises(ConfigError, match=r"images must be a list of column names"):
        TableSource(path, images="image")
    with pytest.raises(ConfigError, match=r"no column is decoded as one"):
        TableSource(path, columns=["label"], image_mode="RGB")
    with pytest.raises(ConfigError, match=r"image_mode must be one of"):
        TableSource(path, images=["image"], image_mode="rgb")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"widths/pad_values name image column\(s\) \['image'\]"):
        TableSource(path, images=["image"], widths={"image": 4})
    with pytest.raises(ConfigError, match=r"decode_threads must be an integer >= 0"):
        TableSource(path, images=["image"], decode_threads=-1)
    t = struct_table(list(images())).append_column("image_shape", pa.array(np.zeros(N)))
    write(t, tmp_path / "c.parquet")
    with pytest.raises(ConfigError, match=r"would both come out as 'image_shape'"):
        TableSource(tmp_path / "c.parquet", images=["image"])


@pytest.mark.parametrize("threads", [0, 3])
def test_a_corrupt_image_names_file_row_and_column(tmp_path: Path, threads: int) -> None:
    blobs = images()
    blobs[7] = blobs[7][: len(blobs[7]) // 2]  # truncated
    blobs[9] = b"GIF89a not an image here"
    hf_dataset(blobs).save_to_disk(str(tmp_path / "saved"))
    src = TableSource(tmp_path / "saved", shuffle=False, decode_threads=threads)
    src.read(0, np.arange(7, dtype=np.int64))
    with pytest.raises(
        FormatError,
        match=r"data-00000-of-00001\.arrow: column 'image', row 7 \(sample 7\): truncated JPEG",
    ):
        src.read(0, np.arange(4, 12, dtype=np.int64))
    with pytest.raises(FormatError, match=r"column 'image', row 9 \(sample 9\): not a JPEG"):
        src.read(0, np.array([9, 1], dtype=np.int64))
    src.close()


def loader(path: Path, **kw: Any) -> Loader:
    opts: dict[str, Any] = {"batch_size": 5, "seed": 3, "steps": 12}
    opts.update(kw)
    return Loader(TableSource(path, window_rows=10), **opts)


def test_same_batches_sync_async_threads_pickled_and_resumed(hf_path: Path) -> None:
    with loader(hf_path) as ld:
        want = [batch_digest([b]) for b in ld]
    assert any("image_shape" in b for b in loader(hf_path, prefetch=0))  # mixed sizes
    with loader(hf_path, prefetch=0) as ld:
        assert [batch_digest([b]) for b in ld] == want
    src = TableSource(hf_path, window_rows=10, decode_threads=0)
    with Loader(src, batch_size=5, seed=3, steps=12) as ld:
        assert [batch_digest([b]) for b in ld] == want
    copy = pickle.loads(pickle.dumps(TableSource(hf_path, window_rows=10)))
    with Loader(copy, batch_size=5, seed=3, steps=12) as ld:
        assert [batch_digest([b]) for b in ld] == want
    assert_resume_exact(lambda: loader(hf_path), steps=12, resume_at=[0, 3, 11])


def test_worker_processes_give_the_loaders_batches(tmp_path: Path) -> None:
    hf_dataset(images()).save_to_disk(str(tmp_path / "saved"), max_shard_size="20KB")
    src = TableSource(tmp_path / "saved", window_rows=10)
    with Loader(src, batch_size=5, seed=3, steps=12) as ld:
        want = [batch_digest([b]) for b in ld]
    for workers in (1, 2):
        config = {"batch_size": 5, "seed": 3, "steps": 12, "prefetch": 0}
        wb = WorkerBatches(RingConfig(source=src, loader=config, workers=workers, slots=4))
        assert [batch_digest([b]) for b in wb] == want, workers
    src.close()


def test_random_crop_takes_ragged_table_images(hf_path: Path) -> None:
    crop = RandomCrop((10, 12), key="image", flip=False)
    with Loader(TableSource(hf_path, shuffle=False), batch_size=6, steps=2, transform=crop) as ld:
        batches = list(ld)
    assert all(b["image"].shape == (6, 10, 12, 3) and "image_shape" not in b for b in batches)


@pytest.mark.parametrize("workers", [0, 2])
def test_torch_dataloader_workers_give_the_loaders_cropped_batches(
    tmp_path: Path, workers: int
) -> None:
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    from headrace import torch as ht

    hf_dataset(images()).to_parquet(str(tmp_path / "t.parquet"))
    crop = RandomCrop((10, 12), key="image")
    opts: dict[str, Any] = {"batch_size": 5, "seed": 3, "steps": 10, "transform": crop}
    with Loader(TableSource(tmp_path / "t.parquet", window_rows=10), **opts) as ld:
        want = [batch_digest([b]) for b in ld]
    dataset = ht.TorchDataset(TableSource(tmp_path / "t.parquet", window_rows=10), **opts)
    with ht.HeadraceDataLoader(dataset, num_workers=workers) as dl:
        got = list(dl)
    assert all(isinstance(b["image"], torch.Tensor) for b in got)
    assert [batch_digest([{k: v.numpy() for k, v in b.items()}]) for b in got] == want


def test_exif_transpose_turns_table_jpegs_upright(tmp_path: Path) -> None:
    from PIL import ImageOps

    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90: height and width swap
    buf = io.BytesIO()
    pixels = np.random.default_rng(2).integers(0, 256, (16, 24, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buf, "JPEG", exif=exif.tobytes())
    path = write(struct_table([buf.getvalue()] * 2), tmp_path / "e.parquet")
    upright = TableSource(path, images=["image"], exif_transpose=True, shuffle=False)
    got = upright.read(0, np.arange(2))["image"]
    want = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(buf.getvalue()))))
    assert got.shape == (2, 24, 16, 3)
    np.testing.assert_array_equal(got[0], want)
    assert upright.fingerprint()["exif_transpose"] is True
    stored = TableSource(path, images=["image"], shuffle=False).read(0, np.arange(1))
    assert stored["image"].shape == (1, 16, 24, 3)


@pytest.mark.skipif(
    sys.version_info[:2] == (3, 12), reason="Python 3.12 starts no thread in an exit handler"
)
def test_images_decode_on_threads_in_an_exit_handler(tmp_path: Path) -> None:
    # The decoders were a ThreadPoolExecutor's, which refuses work once exit begins:
    # "RuntimeError: cannot schedule new futures after interpreter shutdown".
    path = write(struct_table(images(kinds=("jpeg", "grey"))), tmp_path / "t.parquet")
    read = (
        f"    src = TableSource({str(path)!r}, images=['image'], decode_threads=2,\n"
        "                      image_mode='RGB')\n"
        "    with Loader(src, batch_size=6, steps=3) as ld:\n"
        "        print(batch_digest(list(ld)))\n"
    )
    script = (
        "import atexit\n"
        "from headrace.formats import TableSource\n"
        "from headrace.pipeline import Loader\n"
        "from headrace.testing import batch_digest\n"
        f"def read():\n{read}"
        "atexit.register(read)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    src = TableSource(path, images=["image"], decode_threads=2, image_mode="RGB")
    with Loader(src, batch_size=6, steps=3) as ld:
        want = batch_digest(list(ld))
    assert (done.returncode, done.stdout, done.stderr) == (0, want + "\n", "")
