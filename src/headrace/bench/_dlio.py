"""DLIO workload YAML -> a headrace :class:`Workload`.

Reads the sections DLIO documents (``dataset``, ``reader``, ``train``,
``storage``, ``metric``; ``model``/``workflow``/``checkpoint`` are ignored)
and maps them onto the ``files`` kind. ``scale`` multiplies the number of
files (the dataset size); ``record_scale`` multiplies record sizes *and*
computation time together, so the demand per accelerator (batch x record /
compute time) stays what the YAML describes. ``storage_type: s3`` reads the
dataset from ``s3://<storage_root>/<data_folder>`` at
``storage_options.endpoint_url`` (credentials from the usual AWS variables),
or, with no endpoint, from a local S3 emulator started for the run (as
``headrace bench --storage s3``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from headrace.bench._workload import TrainConfig, Workload
from headrace.errors import ConfigError

__all__ = ["dlio_workload"]

_FORMATS = {"npz": "npz", "npy": "npy", "jpeg": "jpeg", "png": "png", "hdf5": "hdf5"}
# Record formats without a decoder here are read as fixed-size raw records.
_RAW = {"tfrecord", "indexed_binary", "mmap_indexed_binary", "csv", "data_loader"}


def _first(section: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in section:
            return section[k]
    return default


def _storage(path: str, stype: str, storage: Mapping[str, Any], folder: str) -> dict[str, Any]:
    """The reader's storage keys for DLIO's ``storage`` section."""
    if stype == "local_fs":
        return {}
    if stype != "s3":
        raise ConfigError(
            f"{path}: storage.storage_type {stype!r} is not supported: local_fs or s3"
        )
    out: dict[str, Any] = {"storage": "s3"}
    bucket = str(storage.get("storage_root") or "").strip("/")
    if bucket and bucket != ".":
        out["storage_url"] = f"s3://{bucket}/{folder.strip('/')}"
    options = storage.get("storage_options") or {}
    endpoint = options.get("endpoint_url") or options.get("endpoint")
    if endpoint:
        out["endpoint"] = str(endpoint)
    return out


def dlio_workload(
    path: str, *, scale: float = 1.0, record_scale: float = 1.0, steps: int | None = None
) -> Workload:
    """The headrace workload equivalent to DLIO's YAML at ``path``, scaled."""
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - pyyaml is in the test extra
        raise ConfigError("--dlio needs PyYAML: pip install pyyaml") from exc
    with open(path) as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, dict) or "dataset" not in doc:
        raise ConfigError(f"{path}: not a DLIO workload (expected a mapping with 'dataset')")
    ds, rd = doc.get("dataset") or {}, doc.get("reader") or {}
    tr, metric, storage = doc.get("train") or {}, doc.get("metric") or {}, doc.get("storage") or {}
    fmt = str(ds.get("format", "npz"))
    if fmt not in _FORMATS and fmt not in _RAW:
        raise ConfigError(f"{path}: dataset.format {fmt!r} is not supported")
    if scale <= 0 or record_scale <= 0:
        raise ConfigError(f"scale and record_scale must be > 0 (got {scale}, {record_scale})")
    record = float(_first(ds, "record_length_bytes", "record_length", default=65536))
    stdev = float(
        _first(
            ds, "record_length_bytes_stdev", "record_length_stdev", "record_length_std", default=0
        )
    )
    batch = int(rd.get("batch_size", 1))
    files = max(1, round(int(ds.get("num_files_train", 1)) * scale))
    per_file = int(ds.get("num_samples_per_file", 1))
    if files * per_file < batch:
        files = -(-batch // per_file)
    model = doc.get("model")
    name = model.get("name") if isinstance(model, dict) else model
    name = str(name or os.path.splitext(os.path.basename(path))[0])
    stype = str(storage.get("storage_type", "local_fs"))
    train = TrainConfig(
        batch_size=batch,
        steps=steps or max(2, min(8, files * per_file // batch)),
        trials=3,
        warmup_steps=1,
        computation_time=float(tr.get("computation_time", 0.0)) * record_scale,
        computation_time_stdev=float(tr.get("computation_time_stdev", 0.0)) * record_scale,
        au_threshold=float(metric.get("au", 0.90)),
        seed=int(rd.get("seed", 0) or 0),
    )
    # Fixed-size records without a decoder here become NPY arrays of records
    # (read whole, like DLIO's readers); one record per file stays raw bytes.
    out_fmt = _FORMATS.get(fmt) or ("raw" if per_file == 1 else "npy")
    one = per_file == 1
    return Workload(
        name=name,
        kind="files",
        description=f"DLIO {os.path.basename(path)} (files x{scale:g}, records x{record_scale:g})",
        dataset={
            "format": out_fmt,
            "files": files,
            "samples_per_file": per_file,
            "record_bytes": max(1, round(record * record_scale)),
            "record_bytes_stdev": round(stdev * record_scale),
            "dlio_format": fmt,
        },
        reader={
            "in_flight": int(rd.get("prefetch_size", 0) or 2 * int(rd.get("read_threads", 4) or 1)),
            "decode_threads": int(rd.get("read_threads", 2) or 1),
            "dlio_storage_root": str(storage.get("storage_root", "")),
            "dlio_storage_type": stype,
            "dlio_odirect": bool(doc.get("odirect", False)),
            **_storage(path, stype, storage, str(ds.get("data_folder") or name)),
        },
        train=train,
        variants=(
            ("map-style", "iterable", "headrace", "headrace-raw", "ceiling")
            if one
            else ("map-style", "iterable", "headrace")
        ),
    )
