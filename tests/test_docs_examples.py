"""Every ```python block of README.md and docs/*.md runs, as written, on real data.

Each block is one test, named by file and line (``docs/rows.md:15``). It runs in
a fresh directory holding small real datasets under the names the examples use
(``_write_datasets``), in a namespace holding the few names the prose around a
block implies (``IMPLIED``), with the S3 endpoints it names served by a moto
server holding the objects it names (``PLACEHOLDER_ENDPOINTS``, ``_s3_objects``),
and with every loader stopping after a few batches (``STEPS``), since the
examples iterate loaders that never end. A traceback shows the document's own
file and lines.

A block that cannot run anywhere the tests run is marked in the document, on
the line before its fence, with ``<!-- not run: REASON -->``; one that needs
what only some machines have with ``<!-- needs: cuda -->`` (or ``fuse``). Both
skip with the reason.
"""

from __future__ import annotations

import ast
import functools
import io
import itertools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace._closing import Closing
from headrace.emulate import LocalS3, fuse_available
from headrace.formats import (
    FileSource,
    PaddedRows,
    TokenSource,
    encode,
    synthetic_arrays,
    write_sample_file,
)
from headrace.io import ObjectStore
from headrace.pipeline import Loader

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```python\s*$")
MARK = re.compile(r"^<!--\s*(not run|needs)\s*:?\s*(.*?)\s*-->$")


@dataclass(frozen=True, kw_only=True)
class Block:
    document: str  # relative to the repository, e.g. "docs/rows.md"
    line: int  # of the opening fence, 1-based
    code: str
    mark: tuple[str, str] | None  # ("not run", reason) or ("needs", what)

    @property
    def id(self) -> str:
        return f"{self.document}:{self.line}"


def _blocks(text: str, document: str) -> list[Block]:
    """The ```python blocks of a Markdown document, each with the mark just before it."""
    found = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if not FENCE.match(lines[i]):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = next((s.strip() for s in reversed(lines[:i]) if s.strip()), "")
        mark = MARK.match(before)
        found.append(
            Block(
                document=document,
                line=i + 1,
                code="\n".join(lines[i + 1 : end]) + "\n",
                mark=(mark[1], mark[2]) if mark else None,
            )
        )
        i = end + 1
    return found


BLOCKS = [
    block
    for path in DOCUMENTS
    for block in _blocks(path.read_text(), path.relative_to(ROOT).as_posix())
]

# -- what a block may need that only some machines have -------------------------------------


def _cuda() -> tuple[bool, str]:
    torch = pytest.importorskip("torch")
    return torch.cuda.is_available(), "no CUDA device (torch.cuda.is_available() is False)"


def _fuse() -> tuple[bool, str]:
    ok, reason = fuse_available()
    return ok, f"FUSE unavailable: {reason}"


NEEDS: dict[str, Callable[[], tuple[bool, str]]] = {"cuda": _cuda, "fuse": _fuse}


def _skip_reason(block: Block) -> str | None:
    """Why the block is not run here (None: it runs); a mark without a reason is an error."""
    if block.mark is None:
        return None
    kind, what = block.mark
    if kind == "not run":
        assert what, f"{block.id}: '<!-- not run -->' needs a reason: '<!-- not run: REASON -->'"
        return f"not run: {what}"
    assert what in NEEDS, f"{block.id}: '<!-- needs: {what} -->': known needs are {sorted(NEEDS)}"
    ok, reason = NEEDS[what]()
    return None if ok else reason


# -- iteration --------------------------------------------------------------------------------

# Batches a loader yields before its iteration ends: the examples iterate loaders
# that never end (steps=None), as a training script does.
STEPS = 3
# Blocks that need more, by a line they hold.
LONGER = {"if dl.step % 1000 == 0:": 1000, "if loader.step % 1000 == 0:": 1001}


def _capped(iterate: Callable[[Any], Iterator[Any]], steps: int) -> Callable[[Any], Iterator[Any]]:
    def capped_iter(self: Any) -> Iterator[Any]:
        batches = iterate(self)
        try:
            yield from itertools.islice(batches, steps)
        finally:
            batches.close()  # type: ignore[attr-defined]  # stops the read-ahead or workers

    return capped_iter


# -- data ---------------------------------------------------------------------------------------

ROWS = 9001  # docs/io.md reads row 9000 of tokens.bin (rows of 4,100 bytes)


def _padded(rng: np.random.Generator, n: int, width: int, dtype: str) -> tuple[Any, Any]:
    """Right-padded token rows (pad id 0) and their masks; every row has tokens."""
    lengths = rng.integers(1, width + 1, size=n)
    mask = np.arange(width) < lengths[:, None]
    tokens = rng.integers(1, 50_000, size=(n, width)).astype(dtype) * mask
    return tokens, mask


def _token_table(n: int, seed: int) -> Any:
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    ids = [rng.integers(1, 50_000, size=int(k), dtype=np.int32) for k in rng.integers(8, 600, n)]
    return pa.table(
        {
            "input_ids": pa.array(ids, type=pa.list_(pa.int32())),
            "label": pa.array(rng.integers(0, 10, n), type=pa.int64()),
        }
    )


def _save_to_disk(table: Any, path: Path) -> None:
    import datasets  # a test extra, imported only here: it takes seconds

    datasets.Dataset(table).save_to_disk(str(path), num_shards=2)


def _jpegs(root: Path, sizes: list[tuple[int, int]]) -> None:
    root.mkdir(parents=True)
    for i, (h, w) in enumerate(sizes):
        image = synthetic_arrays("jpeg", seed=i, shape=(h, w, 3))
        write_sample_file("jpeg", root / f"{i:03d}.jpg", image)


def _image_table(path: Path, image: str, label: str, sizes: list[tuple[int, int]]) -> None:
    """A Parquet file as the Hub holds a vision dataset: ``image`` a datasets
    ``Image()`` column (``struct<bytes, path>`` and the ``huggingface`` metadata)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    blobs = [
        encode("jpeg", synthetic_arrays("jpeg", seed=i, shape=(h, w, 3)))
        for i, (h, w) in enumerate(sizes)
    ]
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    features = {image: {"_type": "Image"}, label: {"dtype": "int64", "_type": "Value"}}
    table = pa.table(
        {
            image: pa.array([{"bytes": b, "path": None} for b in blobs], struct),
            label: np.arange(len(blobs), dtype=np.int64) % 3,
        }
    ).replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    path.parent.mkdir(parents=True)
    pq.write_table(table, path, row_group_size=64)


def _row_file(path: Path, rows: Any) -> None:
    rows.tofile(path)
    Path(f"{path}.json").write_text(json.dumps({"dtype": str(rows.dtype), "width": rows.shape[1]}))


def _write_datasets(root: Path) -> None:
    """What the examples open, under the names they use."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50_000, size=1 << 20, dtype=np.uint16)
    tokens.tofile(root / "train.bin")  # nanoGPT: uint16, no sidecar
    tokens[:600_000].tofile(root / "train-00.bin")
    tokens[400_000:].tofile(root / "train-01.bin")
    tokens[-200_000:].tofile(root / "val.bin")  # README.md "Evaluation", docs/frameworks.md
    (root / "data").mkdir()
    tokens[:200_000].tofile(root / "data" / "tokens.bin")

    # Padded rows of 1,025 tokens: tokens.npy / mask.npy, and the same rows raw in tokens.bin.
    block, block_mask = _padded(rng, 64, 1025, "uint32")
    reps = -(-ROWS // 64)
    _row_file(root / "tokens.bin", np.tile(block, (reps, 1))[:ROWS])
    np.save(root / "tokens.npy", np.tile(block.astype(np.uint16), (reps, 1))[:ROWS])
    np.save(root / "mask.npy", np.tile(block_mask, (reps, 1))[:ROWS])
    for name in ("sft", "chat"):
        rows, mask = _padded(rng, 256, 1025, "uint16")
        np.save(root / f"{name}_tokens.npy", rows)
        np.save(root / f"{name}_mask.npy", mask)
    for name, width in (("a", 64), ("p", 256), ("n", 256)):
        rows, mask = _padded(rng, 128, width, "uint32")
        _row_file(root / f"{name}.tok.bin", rows)
        if name != "n":
            np.save(root / f"{name}.mask.npy", mask)
    # docs/rows.md "A varying number of hard negatives": query i has 2 + i % 6 of 7.
    count = 2 + np.arange(128) % 6
    neg_rng = np.random.default_rng(7)  # its own: the datasets after it stay as they were
    for i in range(7):
        rows, _ = _padded(neg_rng, 128, 256, "uint32")
        rows[count <= i] = 0
        _row_file(root / f"neg{i}.tok.bin", rows)

    # docs/start.md "Text in JSONL": documents of 20 to 2,000 words.
    words = "the mill race carries water to a wheel that must never run dry".split()
    text_rng = np.random.default_rng(11)  # its own: the datasets after it stay as they were
    with open(root / "docs.jsonl", "w") as f:
        for i, n in enumerate(text_rng.integers(20, 2000, size=200)):
            f.write(json.dumps({"id": i, "text": " ".join(text_rng.choice(words, n))}) + "\n")

    table = _token_table(300, seed=1)
    _save_to_disk(table, root / "hf_dataset_dir")
    _save_to_disk(table, root / "path" / "to" / "save_to_disk_dir")
    pq.write_table(table, root / "ds_dir_or.parquet", row_group_size=100)
    _jpegs(root / "jpegs", [(48 + 8 * i, 64 - 4 * i) for i in range(8)])
    # docs/files.md "Labels": an ImageNet-style layout, a folder a class (val lacks one).
    for split, per in (("train", {"n01": 4, "n02": 4, "n03": 4}), ("val", {"n01": 3, "n03": 3})):
        for c, count in per.items():
            _jpegs(root / "imagenet" / split / c, [(40 + 8 * i, 56 - 4 * i) for i in range(count)])
    # ... and a flat validation folder with Kaggle's LOC_val_solution.csv (a class and
    # its boxes a row; one image more than the folder holds).
    flat = root / "imagenet" / "val_flat"
    _jpegs(flat, [(40, 48)] * 4)
    rows = ["ImageId,PredictionString"]
    for i, wnid in enumerate(("n03", "n01", "n03", "n02", "n01")):
        if i < 4:
            (flat / f"{i:03d}.jpg").rename(flat / f"ILSVRC2012_val_{i + 1:08d}.JPEG")
        rows.append(f"ILSVRC2012_val_{i + 1:08d},{wnid} 1 2 30 40 {wnid} 5 6 20 30")
    (root / "imagenet" / "LOC_val_solution.csv").write_text("\n".join(rows) + "\n")
    # docs/rows.md "Lists of lists of one shape": Whisper's input features as ds.map
    # saves them (lists of 80 lists of 3,000 floats), and token labels.
    n, feats = 16, np.random.default_rng(12).random(16 * 80 * 3000, dtype=np.float32)
    inner = pa.ListArray.from_arrays(np.arange(n * 80 + 1, dtype=np.int32) * 3000, feats)
    labels = [list(range(i, i + 20 + i)) for i in range(n)]
    whisper = pa.table(
        {
            "input_features": pa.ListArray.from_arrays(
                np.arange(n + 1, dtype=np.int32) * 80, inner
            ),
            "labels": pa.array(labels, pa.list_(pa.int64())),
        }
    )
    (root / "whisper_features").mkdir()
    pq.write_table(whisper, root / "whisper_features" / "train-00000-of-00001.parquet")
    # docs/rows.md "Rows of lists": a tokenized triplets dataset, an anchor's ids and
    # 0 to 6 negatives' ids a row.
    ids = np.random.default_rng(13).integers(0, 32_000, (24, 7, 40)).tolist()
    (root / "triplets").mkdir()
    pq.write_table(
        pa.table(
            {
                "anchor_ids": pa.array([r[0][: 10 + i] for i, r in enumerate(ids)]),
                "negative_ids": pa.array(
                    [[n[: 5 + j] for j, n in enumerate(r[: i % 7])] for i, r in enumerate(ids)],
                    pa.list_(pa.list_(pa.int32())),
                ),
            }
        ),
        root / "triplets" / "train-00000-of-00001.parquet",
    )
    # docs/rows.md "Rows of items": a detection dataset's Parquet shard, its objects a
    # struct of lists as datasets stores them (bbox: lists of fixed-size lists of 4).
    counts = np.arange(24) % 7
    ends = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    boxes = pa.FixedSizeListArray.from_arrays(np.arange(ends[-1] * 4, dtype=np.float32), 4)
    objects = pa.StructArray.from_arrays(
        [
            pa.ListArray.from_arrays(ends, boxes),
            pa.ListArray.from_arrays(ends, pa.array(np.arange(ends[-1]) % 80)),
        ],
        names=["bbox", "category"],
    )
    (root / "detection").mkdir()
    pq.write_table(
        pa.table({"objects": objects, "image_id": np.arange(24)}),
        root / "detection" / "train-00000-of-00001.parquet",
    )
    # README.md and docs/rows.md "Image columns": Hub vision datasets' Parquet shards.
    sizes = [(40 + 8 * (i % 3), 48 - 4 * (i % 3)) for i in range(200)]
    _image_table(
        root / "beans" / "train" / "train-00000-of-00001.parquet", "image", "labels", sizes
    )
    _image_table(
        root / "cifar10_parquet" / "train-00000-of-00001.parquet", "img", "label", [(32, 32)] * 200
    )
    # docs/files.md "Image modes": a crawl's PNGs, grey, grey + alpha, RGB and RGBA.
    (root / "crawl").mkdir()
    for i in range(8):
        image = synthetic_arrays("png", seed=i, shape=(24, 32, 1 + i % 4))
        write_sample_file("png", root / "crawl" / f"{i:03d}.png", image)
    # docs/files.md "WebP": still images, RGB and RGBA.
    (root / "webps").mkdir()
    for i in range(8):
        image = synthetic_arrays("webp", seed=i, shape=(24, 32, 3 + i % 2))
        write_sample_file("webp", root / "webps" / f"{i:03d}.webp", image)
    # docs/files.md "EXIF orientation": phone photos, tagged with each orientation 1-8.
    from PIL import Image

    (root / "photos").mkdir()
    for i in range(8):
        exif = Image.Exif()
        exif[0x0112] = i + 1
        image = synthetic_arrays("jpeg", seed=i, shape=(32, 32, 3))
        Image.fromarray(image).save(root / "photos" / f"{i:03d}.jpg", exif=exif.tobytes())
    (root / "retinanet").mkdir()  # docs/objects.md: a local directory opened as a store
    # docs/frameworks.md "Samples of several shapes": a detection set, one .npz a sample.
    (root / "coco_npz").mkdir()
    for i in range(16):
        n = i % 4
        np.savez(
            root / "coco_npz" / f"{i:03d}.npz",
            image=synthetic_arrays("jpeg", seed=i, shape=(24 + 4 * (i % 3), 32 - 4 * (i % 2), 3)),
            boxes=rng.random((n, 4), dtype=np.float32) * 20,
            labels=rng.integers(1, 80, n).astype(np.int64),
        )
    # docs/files.md "MDS shards": a Streaming dataset as MDSWriter writes one.
    from _mds_files import write_mds

    mds = [
        {"image": encode("jpeg", synthetic_arrays("jpeg", seed=i, shape=(24, 32 + 8 * (i % 2), 3))),
         "label": i % 10, "caption": f"sample {i}"}
        for i in range(40)
    ]  # fmt: skip
    write_mds(root / "mds_train", {"image": "jpeg", "label": "int", "caption": "str"}, mds)


@pytest.fixture(scope="module")
def datasets_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("docs-data")
    _write_datasets(root)
    return root


# -- object storage -------------------------------------------------------------------------------

# The endpoints the examples name (None: AWS itself), all served by the tests' moto
# server instead. Any other endpoint (an example's own LocalS3) is left alone.
PLACEHOLDER_ENDPOINTS = {
    None,
    "http://127.0.0.1:9000",
    "http://minio:9000",
    "http://minio.local:9000",
}


def _s3_objects(root: Path) -> dict[str, bytes]:
    """Bucket ``bucket``'s objects, as the examples name them."""
    import pyarrow.parquet as pq

    rng = np.random.default_rng(2)
    objects: dict[str, bytes] = {}
    for i in range(16):  # one size: docs/files.md stacks them into (64, H, W, 3)
        objects[f"train/{i:03d}.jpg"] = encode(
            "jpeg", synthetic_arrays("jpeg", seed=i, shape=(32, 48, 3))
        )
    objects["data/train.bin"] = rng.integers(0, 2**31, 1 << 19, dtype=np.uint32).tobytes()
    rows, mask = _padded(rng, 256, 1025, "uint16")
    objects["sft/tokens.npy"] = encode("npy", rows)
    objects["sft/mask.npy"] = encode("npy", mask)
    anchors, _ = _padded(rng, 128, 64, "uint32")
    positives, _ = _padded(rng, 128, 256, "uint32")
    objects["a.npy"] = encode("npy", anchors)
    objects["p.bin"] = positives.tobytes()
    objects["p.bin.json"] = json.dumps({"dtype": "uint32", "width": 256}).encode()
    table = _token_table(400, seed=3)
    for k in range(2):
        out = io.BytesIO()
        pq.write_table(table.slice(200 * k, 200), out, row_group_size=50)
        objects[f"datasets/tokenized/train/part-{k}.parquet"] = out.getvalue()
    _save_to_disk(table, root / "tokenized")
    for path in sorted((root / "tokenized").iterdir()):
        objects[f"tokenized/train/{path.name}"] = path.read_bytes()
    return objects


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with LocalS3() as server:
        server.create_bucket("bucket")
        client = server.info.boto3_client()
        for key, body in _s3_objects(tmp_path_factory.mktemp("docs-s3")).items():
            client.put_object(Bucket="bucket", Key=key, Body=body)
        yield server.endpoint


def _opens_s3(block: Block) -> bool:
    """Whether the block names an S3 URL to open (not a ``name=`` label for decoded bytes)."""
    return re.search(r"(?<!name=)[\"']s3://", block.code) is not None


def _point_at(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    """Send every S3 store an example opens at a placeholder endpoint to ``endpoint``."""
    opened = ObjectStore.__init__

    @functools.wraps(opened)  # sources check store_options against its signature
    def init(self: ObjectStore, url: Any, **options: Any) -> None:
        if str(url).startswith("s3://") and options.get("endpoint") in PLACEHOLDER_ENDPOINTS:
            options["endpoint"] = endpoint
        opened(self, url, **options)

    monkeypatch.setattr(ObjectStore, "__init__", init)
    # moto takes any credentials; these stand for AWS's own, from the environment.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")


# -- names the prose implies ----------------------------------------------------------------------


def _train_step(*args: Any) -> Any:
    """Stands for the user's step: ``train_step(batch)`` (PyTorch), ``train_step(state,
    batch)`` (JAX, returning the new state)."""
    return args[0] if len(args) == 2 else None


# One entry per name, built (in this order, from the names built before it) only for
# blocks that use it: what the text around a block says it stands for.
IMPLIED: dict[str, Callable[[dict[str, Any]], Any]] = {
    # README.md "Train on a token file": this host's place among the hosts.
    "rank": lambda ns: 0,
    "world_size": lambda ns: 1,
    # README.md "Train on a token file": the training checkpoint being assembled.
    "checkpoint": lambda ns: {},
    # README.md "Augmentation that replays": a mask token id, a token and a JPEG source.
    "MASK_ID": lambda ns: 50_000,
    "tokens": lambda ns: TokenSource("train.bin", context=1024),
    "jpegs": lambda ns: FileSource("jpegs", format="jpeg"),
    # docs/frameworks.md: the first PyTorch block's source (context 16, not 1,024, so that
    # the checkpoint block's 1,000 steps take little time), the model being trained, its
    # optimizer, its step; the JAX block's train state.
    "source": lambda ns: TokenSource(["train-00.bin", "train-01.bin"], dtype="uint16", context=16),
    "model": lambda ns: pytest.importorskip("torch").nn.Linear(4, 4),
    "optim": lambda ns: pytest.importorskip("torch").optim.SGD(ns["model"].parameters(), lr=0.1),
    "train_step": lambda ns: _train_step,
    "state": lambda ns: {},
    # docs/rows.md "Mixtures": three row sources.
    "chat_rows": lambda ns: PaddedRows("chat_tokens.npy", "chat_mask.npy", context=1024),
    "code_rows": lambda ns: PaddedRows("sft_tokens.npy", "sft_mask.npy", context=1024),
    "math_rows": lambda ns: PaddedRows("tokens.npy", "mask.npy", context=1024),
    # README.md "Evaluation", docs/frameworks.md: the model's loss of each row (NumPy,
    # torch and jax arrays alike: a float per row).
    "per_sample_loss": lambda ns: lambda x, y: (x != y).sum(-1) * 1.0,
    # docs/start.md: the user's tokenizer's encode, text -> list of ints (one id a word).
    "tokenize": lambda ns: lambda text: [sum(map(ord, w)) % 50_000 for w in text.split()],
    # README.md "Evaluation", tail=True: the model's loss of each target (rows, L).
    "per_token_loss": lambda ns: lambda x, y: (x != y) * 1.0,
}


def _names(tree: ast.AST) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def _imports(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


# -- the tests -----------------------------------------------------------------------------------


def test_the_documents_have_examples() -> None:
    assert len(BLOCKS) >= 20, [b.id for b in BLOCKS]


def test_every_implied_name_is_used() -> None:
    used = set().union(*(_names(ast.parse(b.code)) for b in BLOCKS if b.mark is None))
    assert set(IMPLIED) <= used, f"IMPLIED names no block uses: {sorted(set(IMPLIED) - used)}"


def test_marks_are_read_and_need_a_reason() -> None:
    text = "\n".join(
        [
            "<!-- not run: needs torchrun -->",
            "```python",
            "import torch.distributed",
            "```",
            "<!-- not run -->",
            "",
            "```python",
            "x = 1",
            "```",
            "<!-- needs: quantum -->",
            "```python",
            "```",
            "```python",
            "y = 2",
            "```",
        ]
    )
    marked, bare, unknown, plain = _blocks(text, "x.md")
    assert (marked.id, marked.code) == ("x.md:2", "import torch.distributed\n")
    assert _skip_reason(marked) == "not run: needs torchrun"
    with pytest.raises(AssertionError, match=r"x.md:7: .* needs a reason"):
        _skip_reason(bare)
    with pytest.raises(AssertionError, match=r"known needs are \['cuda', 'fuse'\]"):
        _skip_reason(unknown)
    assert _skip_reason(plain) is None and plain.code == "y = 2\n"


def _integration(block: Block) -> bool:
    """A block that talks to S3 (moto), mounts FUSE or starts worker processes."""
    return (
        _opens_s3(block)
        or block.mark == ("needs", "fuse")
        or re.search(r"num_workers=[1-9]", block.code) is not None
    )


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(b, id=b.id, marks=[pytest.mark.integration] if _integration(b) else [])
        for b in BLOCKS
    ],
)
def test_example_runs(
    block: Block,
    datasets_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    # Tracebacks show the document's own lines.
    code = compile("\n" * block.line + block.code, ROOT / block.document, "exec")
    reason = _skip_reason(block)
    if reason is not None:
        pytest.skip(f"{block.id}: {reason}")
    tree = ast.parse(block.code)
    imported = _imports(tree)
    for module, needs in (("headrace.torch", "torch"), ("headrace.jax", "jax")):
        if module in imported or needs in imported:
            pytest.importorskip(needs)

    for entry in datasets_dir.iterdir():
        (tmp_path / entry.name).symlink_to(entry)
    monkeypatch.chdir(tmp_path)
    if _opens_s3(block):
        _point_at(monkeypatch, request.getfixturevalue("s3_endpoint"))
    steps = next((n for line, n in LONGER.items() if line in block.code), STEPS)
    monkeypatch.setattr(Loader, "__iter__", _capped(Loader.__iter__, steps))
    if "HeadraceDataLoader" in block.code:
        from headrace.torch import HeadraceDataLoader

        monkeypatch.setattr(
            HeadraceDataLoader, "__iter__", _capped(HeadraceDataLoader.__iter__, steps)
        )

    namespace: dict[str, Any] = {"__name__": "__main__"}  # as a script run by `python`
    used = _names(tree)
    for name, make in IMPLIED.items():
        if name in used:
            namespace[name] = make(namespace)
    try:
        exec(code, namespace)
    finally:  # what the script's exit would close
        for value in namespace.values():
            if isinstance(value, Closing):
                value.close()
