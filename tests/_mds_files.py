"""A small MDS writer for tests, following MosaicML Streaming's format (version 2).

Written from the format as Streaming's ``MDSWriter`` documents and writes it (columns
in sorted name order; a shard: uint32 sample count, count + 1 uint32 offsets from
the file's start, the writer's config as JSON, the samples; a sample: one uint32
size per variable-size column, then the columns' bytes), so the reader is tested on
the bytes Streaming writes, not on bytes of its own making.

``compression`` compresses each shard whole as Streaming's ``MDSWriter(compression=...)``
does (``streaming/base/compression.py``: ``zstd.compress(data, level)`` (zstandard
writes the same frame), ``gzip.compress``, ``bz2.compress``, ``brotli.compress``,
``snappy.compress``, each at Streaming's default level), stores only the compressed
file (``shard.00000.mds.zstd``) and describes both in the index (``zip_data`` and
``raw_data``, with ``hashes``' hex digests of each, as ``Writer._process_file``).
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

SCALARS = {
    **{n: n for n in ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64")},
    **{n: n for n in ("float16", "float32", "float64")},
    "int": "int64",
}
_DTYPE_BYTE = {"uint8": 8, "int8": 9, "uint16": 16, "int16": 17, "float16": 18, "uint32": 32,
               "int32": 33, "float32": 34, "uint64": 64, "int64": 65, "float64": 66}  # fmt: skip


def fixed_size(encoding: str) -> int | None:
    if encoding in SCALARS:
        return np.dtype(SCALARS[encoding]).itemsize
    parts = encoding.split(":")
    if parts[0] == "ndarray" and len(parts) == 3:
        shape = [int(d) for d in parts[2].split(",")]
        return int(np.prod(shape)) * np.dtype(parts[1]).itemsize
    return None


def encode(encoding: str, value: Any) -> bytes:
    """``value`` as Streaming's encoding ``encoding`` stores it."""
    base, _, args = encoding.partition(":")
    if encoding in SCALARS:
        return (
            np.array(value, dtype=SCALARS[encoding])
            .astype("<" + np.dtype(SCALARS[encoding]).str[1:])
            .tobytes()
        )
    if base == "bytes" or base in ("jpeg", "png"):
        return bytes(value)
    if base in ("str", "str_int"):
        return str(value).encode("utf-8")
    if base == "json":
        return json.dumps(value).encode("utf-8")
    if base == "pkl":
        return pickle.dumps(value)
    if base == "ndarray":
        a = np.asarray(value)
        parts = args.split(":") if args else []
        out = b""
        if not parts:
            out += bytes([_DTYPE_BYTE[a.dtype.name]])
        if len(parts) < 2:
            width = next(w for w, t in enumerate("BHIQ") if max(a.shape) < 1 << (8 << w))
            out += bytes([(a.ndim << 2) | width])
            out += np.array(a.shape, dtype="<" + "BHIQ"[width]).tobytes()
        return out + a.astype(a.dtype.newbyteorder("<")).tobytes()
    raise ValueError(f"no test encoding for {encoding!r}")


def encode_sample(columns: Sequence[tuple[str, str]], sample: Mapping[str, Any]) -> bytes:
    sizes, data = [], []
    for name, encoding in columns:
        datum = encode(encoding, sample[name])
        if fixed_size(encoding) is None:
            sizes.append(len(datum))
        data.append(datum)
    return np.array(sizes, dtype="<u4").tobytes() + b"".join(data)


#: Streaming's default level of each codec family.
_LEVEL = {"zstd": 3, "gz": 9, "bz2": 9, "br": 11}


def compress(codec: str, data: bytes) -> bytes:
    """``data`` compressed as Streaming's ``compress(codec, data)`` does."""
    family, _, level_text = codec.partition(":")
    level = int(level_text) if level_text else _LEVEL.get(family, 0)
    if family == "zstd":
        import zstandard

        return zstandard.ZstdCompressor(level=level).compress(data)
    if family == "gz":
        return gzip.compress(data, level)
    if family == "bz2":
        return bz2.compress(data, level)
    if family == "br":
        import brotli

        return brotli.compress(data, quality=level)  # type: ignore[no-any-return]
    if family == "snappy":
        import snappy

        return snappy.compress(data)  # type: ignore[no-any-return]
    raise ValueError(f"no test codec {codec!r}")


def _info(data: bytes, name: str, hashes: Sequence[str]) -> dict[str, Any]:
    digests = {}
    for algo in hashes:
        if algo.startswith("xxh"):
            import xxhash

            digests[algo] = getattr(xxhash, algo)(data).hexdigest()
        else:
            digests[algo] = getattr(hashlib, algo)(data).hexdigest()
    return {"basename": name, "bytes": len(data), "hashes": digests}


def write_mds(
    root: Path,
    columns: Mapping[str, str],
    samples: Sequence[Mapping[str, Any]],
    *,
    per_shard: int = 10,
    entry: Mapping[str, Any] | None = None,
    compression: str | None = None,
    hashes: Sequence[str] = (),
) -> list[Path]:
    """Write ``samples`` as MDS shards of ``per_shard`` samples and ``index.json`` under
    ``root``; ``entry`` overrides keys of every shard's index entry. The stored shards'
    paths (compressed ones with ``compression``, e.g. ``"zstd"`` or ``"gz:1"``)."""
    root.mkdir(parents=True, exist_ok=True)
    cols = [(n, columns[n]) for n in sorted(columns)]
    config = {
        "column_encodings": [e for _, e in cols],
        "column_names": [n for n, _ in cols],
        "column_sizes": [fixed_size(e) for _, e in cols],
        "compression": compression,
        "format": "mds",
        "hashes": list(hashes),
        "size_limit": 1 << 26,
        "version": 2,
    }
    config_data = json.dumps(config, sort_keys=True).encode("utf-8")
    shards, paths = [], []
    for k, first in enumerate(range(0, len(samples), per_shard)):
        encoded = [encode_sample(cols, s) for s in samples[first : first + per_shard]]
        n = len(encoded)
        offsets = np.cumsum([0] + [len(e) for e in encoded]) + 4 + 4 * (n + 1) + len(config_data)
        body = (
            np.uint32(n).tobytes()
            + offsets.astype("<u4").tobytes()
            + config_data
            + b"".join(encoded)
        )
        name = f"shard.{k:05d}.mds"
        stored, zip_data = name, None
        data = body
        if compression:
            data = compress(compression, body)
            stored = f"{name}.{compression.partition(':')[0]}"
            zip_data = _info(data, stored, hashes)
        (root / stored).write_bytes(data)
        paths.append(root / stored)
        shards.append(
            {
                **config,
                "raw_data": _info(body, name, hashes),
                "samples": n,
                "zip_data": zip_data,
                **(entry or {}),
            }
        )
    (root / "index.json").write_text(json.dumps({"shards": shards, "version": 2}, sort_keys=True))
    return paths


def write_two_bad_dtypes(root: Path) -> Path:
    """20 samples of ``x`` (an ``ndarray`` of 3 int8) and ``y`` (``int``) in two shards,
    samples 13 and 18 with a dtype byte (200) that names no dtype; the damaged shard."""
    write_mds(
        root,
        {"x": "ndarray", "y": "int"},
        [{"x": np.arange(3, dtype=np.int8), "y": k} for k in range(20)],
    )
    path = root / "shard.00001.mds"
    data = bytearray(path.read_bytes())
    for i in (3, 8):  # samples 13 and 18: their dtype bytes, after the size of x
        start = int(np.frombuffer(bytes(data[4 * (1 + i) : 4 * (2 + i)]), "<u4")[0])
        data[start + 4] = 200
    path.write_bytes(bytes(data))
    return path
