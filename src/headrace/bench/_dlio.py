"""DLIO workload YAML -> a headrace :class:`Workload`.

Reads the sections DLIO documents (``dataset``, ``reader`` or ``data_reader``,
``train``, ``storage``, ``metric``; of ``workflow``, what it turns on beside
training is named, and ``train: false`` refused) and maps them onto the
``files`` kind; every key not read is named in the description. ``scale``
multiplies the number of files (the dataset size); ``record_scale`` multiplies
record sizes *and* computation time together, so the demand per accelerator
(batch x record / compute time) stays what the YAML describes.

``train.epochs`` (DLIO's default 1): DLIO runs that many epochs of
``floor(files x samples per file / batch)`` steps (one host), with its AU over
them. Here each timed trial is one such epoch of the scaled dataset and there
are ``epochs`` trials, so the run with compute covers DLIO's ``epochs x
steps``. ``train.total_training_steps`` (> 0) caps the steps of an epoch, as in
DLIO, scaled by ``scale`` like the epoch it is part of. ``reader.odirect: true``
reads each file with O_DIRECT (the files kind's ``odirect = true``). Where the
scaled dataset is less than one file (DLIO's LLM and DLRM configs are one file of
up to 4.2 G samples), the one file holds that share of the samples instead.

DLIO's own defaults stand where a key is left out: ``format`` tfrecord,
``read_threads`` 1, ``prefetch_size`` 2 (its data loaders' queue; the pytorch one holds
``ceil(prefetch_size / read_threads)`` per read thread), the seed from ``train.seed``.

``storage_type: s3`` reads the dataset from ``s3://<storage_root>/<data_folder>`` at
``storage_options.endpoint_url`` (credentials from the usual AWS variables),
or, with no endpoint, from a local S3 emulator started for the run (as
``headrace bench --storage s3``).
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from headrace.bench._dlio_keys import not_modelled, unknown_keys
from headrace.bench._files_kind import most_pixels, photo
from headrace.bench._workload import TrainConfig, Workload
from headrace.errors import ConfigError
from headrace.formats import encode

__all__ = ["BUILTIN_DLIO", "builtin_dlio", "dlio_workload", "resolve_dlio"]

#: DLIO workloads that ship with headrace (MLPerf Storage's three: UNet3D, ResNet-50 and
#: CosmoFlow on H100), run by name: ``headrace bench --dlio unet3d_h100``.
BUILTIN_DLIO = os.path.join(os.path.dirname(__file__), "workloads", "dlio")


def builtin_dlio() -> dict[str, str]:
    """The built-in DLIO workloads: name to path."""
    names = sorted(f for f in os.listdir(BUILTIN_DLIO) if f.endswith(".yaml"))
    return {f.removesuffix(".yaml"): os.path.join(BUILTIN_DLIO, f) for f in names}


# YAML 1.1 (PyYAML) reads ``1e-3`` as a string: a float wants a dot (``1.0e-3``). DLIO
# reads its configs through Hydra's OmegaConf, which takes exponents without one, so
# ``computation_time: 1e-3`` is a number to DLIO and must be one here.
_FLOAT = re.compile(
    r"""^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+
    |[0-9][0-9_]*\.[0-9_]*
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |\.(?:inf|Inf|INF))$
    |^\.(?:nan|NaN|NAN)$""",
    re.X,
)


#: Nesting of ``[`` and ``{`` a DLIO YAML may have; its own nest two or three deep.
MAX_FLOW_DEPTH = 64


def _loader(yaml: Any) -> Any:
    """A SafeLoader that reads numbers as DLIO (OmegaConf) does, and refuses flow
    collections nested deeper than :data:`MAX_FLOW_DEPTH`."""

    class Loader(yaml.SafeLoader):  # type: ignore[misc]
        # PyYAML's scanner looks ahead over every open level for each token: a file of
        # 100,000 '[' took 3.3 s of CPU (2c) to fail with a RecursionError; libyaml's
        # CSafeLoader crashed the process on it (SIGSEGV), so it is not used.
        def fetch_flow_collection_start(self, token_class: Any) -> None:
            if self.flow_level >= MAX_FLOW_DEPTH:
                raise yaml.scanner.ScannerError(
                    problem=f"more than {MAX_FLOW_DEPTH} nested '[' or '{{'",
                    problem_mark=self.get_mark(),
                )
            super().fetch_flow_collection_start(token_class)

        # OmegaConf's loader refuses a key given twice in one mapping, so DLIO never runs
        # such a file; PyYAML keeps the last, and a second "reader:" section dropped the
        # first one's batch_size without a word. Only string keys, as OmegaConf checks.
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[str, int] = {}
            for key_node, _ in node.value:
                if key_node.tag != "tag:yaml.org,2002:str":
                    continue
                line = key_node.start_mark.line + 1
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        problem=(
                            f"{key_node.value!r} is given twice, lines {seen[key_node.value]} "
                            f"and {line} (DLIO (OmegaConf) refuses a duplicate key: merge "
                            "them into one): the second"
                        ),
                        problem_mark=key_node.start_mark,
                    )
                seen[key_node.value] = line
            return super().construct_mapping(node, deep=deep)

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
    return Loader


def resolve_dlio(given: str) -> str:
    """The YAML ``--dlio`` names: a file, else a built-in workload by name (with or
    without ``.yaml``); anything else is refused, naming the built-ins."""
    # Any path but a folder: a pipe (--dlio <(sed ... unet3d.yaml)) was "no such file".
    if os.path.exists(given) and not os.path.isdir(given):
        return given
    builtins = builtin_dlio()
    name = given.removesuffix(".yaml")
    if os.sep not in given and name in builtins:
        return builtins[name]
    what = "a folder" if os.path.isdir(given) else "no such file"
    close = difflib.get_close_matches(name, list(builtins), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close and os.sep not in given else ""
    raise ConfigError(
        f"--dlio {given!r}: {what}{hint}; give a DLIO workload YAML, or a built-in one by "
        f"name: {', '.join(builtins)}"
    )


_FORMATS = {"npz": "npz", "npy": "npy", "jpeg": "jpeg", "png": "png", "hdf5": "hdf5"}
# Record formats without a decoder here are read as fixed-size raw records.
_RAW = {"tfrecord", "indexed_binary", "mmap_indexed_binary", "csv", "data_loader"}
# DLIO's older names (its default.yaml, unet3d.yaml and bert.yaml still use them).
_LEGACY = "dlio_"
_NOISE = 80  # the files kind's photo noise (its default)
_TRIAL_SIDE = 2048  # the largest side _image_side encodes an image at


def _storage(
    path: str, stype: str, storage: Mapping[str, Any], folder: str
) -> tuple[dict[str, Any], str]:
    """The reader's storage keys for DLIO's ``storage`` section, and a note for the plan."""
    if stype == "local_fs":
        return {}, ""
    if stype != "s3":
        raise ConfigError(
            f"{path}: storage.storage_type {stype!r} is not supported: local_fs or s3"
        )
    out: dict[str, Any] = {"storage": "s3"}
    root = str(storage.get("storage_root") or "")
    if "://" in root:
        # DLIO passes storage_root to its S3 client as the bucket's name: a URL there read
        # as s3://s3://bucket/<folder> (bucket "s3:"), and failed only once the run began.
        bucket = root.partition("://")[2].strip("/").partition("/")[0] or "BUCKET"
        raise ConfigError(
            f"{path}: storage.storage_root {root!r} is a URL: DLIO takes the bucket's name "
            f"there; give storage_root: {bucket} (the data_folder is the prefix in it)"
        )
    bucket = root.strip("/")
    if folder.startswith("s3://"):  # unet3d_h100_s3.yaml: the folder is the URL already
        out["storage_url"] = folder.rstrip("/")
    elif bucket and bucket != ".":
        out["storage_url"] = f"s3://{bucket}/{folder.strip('/')}"
    options = storage.get("storage_options") or {}
    if not isinstance(options, Mapping):
        raise ConfigError(
            f"{path}: storage.storage_options must be a mapping of keys (got {options!r})"
        )
    key = "endpoint_url" if options.get("endpoint_url") else "endpoint"
    given = options.get(key) or ""
    # A YAML list is the comma-separated one: str() of it split at its commas made the
    # endpoint "['http://a:9020'".
    if isinstance(given, list) and all(isinstance(e, str) for e in given):
        given = ",".join(given)
    if not isinstance(given, str):
        raise ConfigError(
            f"{path}: storage.storage_options.{key} must be a URL, or several comma-separated "
            f"or in a list (got {given!r})"
        )
    endpoints = [e.strip() for e in given.split(",") if e.strip()]
    note = ""
    if endpoints:
        # DLIO's rank r reads from endpoints[r % N]: one host is rank 0.
        out["endpoint"] = endpoints[0]
        if len(endpoints) > 1:
            note = f"; endpoint_url: the first of {len(endpoints)} (DLIO's rank 0)"
    return out, note


def _time(
    section: Mapping[str, Any], key: str, path: str, where: str = "train"
) -> tuple[float, float]:
    """DLIO's ``key`` and ``key_stdev`` of section ``where``: a number, or a normal
    distribution's mapping."""
    name = f"{path}: {where}.{key}"
    value = section.get(key, 0.0)
    if isinstance(value, Mapping):
        kind = str(value.get("type", "normal"))
        if kind != "normal" or "mean" not in value:
            raise ConfigError(
                f"{name} {dict(value)!r}: only a number or a normal distribution "
                "({mean: M, stdev: S}) is supported"
            )
        mean = _number(value, ("mean",), 0.0, name)
        # DLIO sets the distribution's stdev from key_stdev where both are given
        if f"{key}_stdev" not in section:
            return mean, _number(value, ("stdev",), 0.0, name)
    else:
        mean = _number(section, (key,), 0.0, f"{path}: {where}")
    return mean, _number(section, (f"{key}_stdev",), 0.0, f"{path}: {where}")


def _au(metric: Mapping[str, Any], path: str) -> float:
    """DLIO's ``metric.au``: a fraction (0.90), not a percentage."""
    au = _number(metric, ("au",), 0.90, f"{path}: metric")
    if not 0 < au <= 1:
        raise ConfigError(f"{path}: metric.au must be a fraction in (0, 1] (got {metric['au']!r})")
    return au


def _n(count: int, what: str) -> str:
    return f"{count:,} {what}{'' if count == 1 else 's'}"


#: The largest count or size a DLIO config may give: counts and sizes are multiplied
#: and summed as floats (exact to 2**53), and numbers past it are typos or damage.
_MAX_NUMBER = 2**53


def _positive(section: Mapping[str, Any], key: str, default: int, where: str) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}.{key} must be a whole number >= 1 (got {value!r})")
    if value > _MAX_NUMBER:
        raise ConfigError(f"{where}.{key} must be at most 2**53 (got {value!r})")
    return value


def _number(
    section: Mapping[str, Any],
    keys: tuple[str, ...],
    default: float,
    where: str,
    *,
    whole: bool = False,
) -> float:
    """The first of ``keys`` set in ``section`` as a number >= 0 (else ``default``)."""
    key = next((k for k in keys if k in section), keys[0])
    value = section.get(key, default)
    if value is None:
        return default
    kinds = int if whole else int | float
    if isinstance(value, bool) or not isinstance(value, kinds) or value < 0:
        what = "a whole number" if whole else "a number"
        raise ConfigError(f"{where}.{key} must be {what} >= 0 (got {value!r})")
    if not value <= _MAX_NUMBER:  # NaN too: no comparison holds
        raise ConfigError(f"{where}.{key} must be a finite number, at most 2**53 (got {value!r})")
    return float(value)


def _section(doc: Mapping[str, Any], name: str, path: str) -> Mapping[str, Any]:
    # DLIO's LoadConfig takes data_reader where both are given (reader only without it):
    # reader won here, and a file with both ran another batch than DLIO without a word.
    if name == "reader" and "data_reader" in doc:
        name = "data_reader"
    value = doc.get(name) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: {name} must be a mapping of keys (got {value!r})")
    return value


def _record(ds: Mapping[str, Any], where: str, fmt: str, stdev: float) -> tuple[float, str]:
    """DLIO's record size: ``record_dims`` x ``record_element_type``'s size where given
    (before ``record_length``), else ``record_length_bytes``/``record_length`` (whole
    bytes); and a note for the plan where DLIO reads the element type otherwise, or a
    fraction of a byte was dropped."""
    dims = ds.get("record_dims")
    kind = ds.get("record_element_type", "uint8")
    if fmt in ("jpeg", "png"):
        # DLIO's images are 8-bit grey of record_dims: it resets any other element type
        # to uint8 (a warning) before it reads it, whatever it names. Read as given,
        # float32 made ResNet-50's 224 x 224 records 4x the bytes, the images twice the side.
        size = 1
        note = (
            ""
            if kind == "uint8"
            else f"; record_element_type {kind} read as uint8 (DLIO's images are 8-bit)"
        )
    else:
        # DLIO reads the type (np.dtype) with or without record_dims: "float77" beside a
        # record_length_bytes was taken without a word here, and DLIO stops on it.
        size, note = _element_bytes(kind, where), ""
    if not dims:
        keys = ("record_length_bytes", "record_length")
        record = _number(ds, keys, 65536, where)
        if record >= 1 and not float(record).is_integer():
            # DLIO takes it as given (LoadConfig assigns it) and makes records
            # int(sqrt(record)) a side: the fraction of a byte is dropped, never made a
            # byte more. Until 2026-12-07 rounded here (1000.7 to 1001 B) without a word.
            key = next(k for k in keys if k in ds)
            whole = math.floor(record)
            said = f"; {key} {record} read as {whole} B (whole bytes: DLIO drops the fraction)"
            return float(whole), said
        return record, ""
    if not isinstance(dims, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims
    ):
        raise ConfigError(f"{where}.record_dims must be a list of whole numbers > 0 (got {dims!r})")
    if stdev > 0:
        # DLIO's validate() refuses the two together ("Both record_dims and
        # record_length_bytes_stdev are set"); here the records of record_dims took the
        # stdev, a workload DLIO never runs.
        raise ConfigError(
            f"{where}.record_dims {dims!r} with a record_length_bytes_stdev {stdev:g}: "
            "DLIO refuses the two together (records of record_dims are one size); give "
            "record_length_bytes with record_length_bytes_stdev instead, or a stdev of 0"
        )
    if fmt in ("jpeg", "png") and len(dims) > 2:
        # DLIO refuses more than two dims for images (height, width; grey).
        raise ConfigError(
            f"{where}.record_dims {dims!r} with format {fmt!r}: DLIO's images have at "
            f"most 2 dims (height, width; grey); give e.g. {dims[:2]!r}"
        )
    # Python's product: NumPy's int64 one wrapped, 2**32 x 2**32 to 0 B records (refused as
    # "record_length_bytes must be > 0") and (2**32 + 1)**2 to 8.6 GB ones, without a word.
    record = math.prod(dims) * size
    if record > _MAX_NUMBER:
        raise ConfigError(
            f"{where}.record_dims {dims!r} makes records of {record:,} B "
            f"({size} B an element), past 2**53, the most a DLIO size may be here: give smaller "
            "record_dims"
        )
    return float(record), note


def _element_bytes(kind: object, where: str) -> int:
    """The bytes of an element of ``record_element_type`` (a NumPy type name, as DLIO
    reads it), refused unless it is a number or a bool."""
    try:
        dtype = np.dtype(str(kind))
    except (TypeError, ValueError, SyntaxError):  # "(2," is parsed: a SyntaxError traceback
        raise ConfigError(
            f"{where}.record_element_type {kind!r} is not a NumPy type (e.g. uint8, float32)"
        ) from None
    if dtype.itemsize == 0:
        # str, U, V: a type of no bytes made records of 0 B, refused as "record_length_bytes
        # must be > 0", a key the YAML does not set.
        raise ConfigError(
            f"{where}.record_element_type {kind!r} has 0 bytes an element (a string or void "
            "type of no length): give a numeric type, e.g. uint8, float32"
        )
    if dtype.kind not in "biufc" or dtype.fields is not None or dtype.subdtype is not None:
        # "O" (8 B pointers), "M8", "S5", "i4,i4", "(2,3)f4": records sized by a type that
        # holds no number, or several; DLIO fills its records with numbers of the type.
        raise ConfigError(
            f"{where}.record_element_type {kind!r} is {dtype} ({dtype.kind!r}), not a "
            "number: give a numeric type, e.g. uint8, float32, float16, int64"
        )
    return int(dtype.itemsize)


def _image_side(fmt: str, record: int) -> int:
    """The side of the square image (the files kind's RGB photo) stored in about
    ``record`` bytes: sqrt(record / 3) rescaled by one trial encoding (a JPEG of the
    photo is about a quarter of its pixels' bytes; sized by pixels alone, ResNet-50's
    150.5 kB records were 37 kB JPEGs)."""
    side = max(8, round(math.sqrt(record / 3)))
    # Encoded at most _TRIAL_SIDE a side, a larger one sized by its pixels from it: a
    # record of 1e15 B asked NumPy for 4.74 PiB (a MemoryError), 2e10 B for tens of GB.
    trial = min(side, _TRIAL_SIDE)
    try:
        stored = len(encode(fmt, photo(0, (trial, trial, 3), _NOISE))) * (side / trial) ** 2
    except (ImportError, ConfigError):  # no image codec here: the run will say so
        return side
    return max(8, round(side * math.sqrt(record / stored)))


def _threads(rd: Mapping[str, Any], where: str) -> tuple[int, str]:
    """DLIO's ``read_threads`` (its default 1) and a note where 0 is taken as 1."""
    if "read_threads" not in rd:
        return 1, ""
    threads = _number(rd, ("read_threads",), 1, where, whole=True)
    if threads == 0:  # DLIO's pytorch loader then loads in the main thread, with no overlap
        return 1, "; reader.read_threads 0 (loading in the main thread) read as 1"
    return int(threads), ""


def _prefetch(rd: Mapping[str, Any], where: str, threads: int) -> tuple[int, str]:
    """The batches DLIO's data loader queues ahead (the Loader's ``prefetch``), and a
    note where that is not ``prefetch_size``.

    tf.data (DLIO's default loader) prefetches ``prefetch_size`` batches. DLIO's pytorch
    loader gives torch's DataLoader ``read_threads`` workers and a ``prefetch_factor`` of
    ``ceil(prefetch_size / read_threads)`` (2 where that is 0), which torch holds *per
    worker*: read as ``prefetch_size``, UNet3D (4 threads, DLIO's default 2) queued 2
    batches where DLIO queues 4.
    """
    size = int(_number(rd, ("prefetch_size",), 2, where, whole=True))
    loader = str(rd.get("data_loader", "tensorflow"))
    if loader != "pytorch" or int(rd.get("read_threads") or 0) < 1:
        return size or 2, ""  # 0 workers: torch loads in the main thread, no queue to size
    factor = math.ceil(size / threads) or 2
    queued = factor * threads
    if queued == size:
        return queued, ""
    how = f"ceil({size} / {threads}) = {factor}" if size else "2 (prefetch_size 0)"
    return queued, (
        f"; prefetch {queued} batches (DLIO's pytorch loader: {how} per read thread, "
        f"x {threads} threads)"
    )


def _refuse_past_int64(
    path: str, samples: int, batch: int, epochs: int, steps: int, scale: float
) -> None:
    """Refuse a run of more samples than a Loader numbers (int64), in DLIO's keys: it was
    TrainConfig's "train: batch_size x (warmup_steps + trials x steps) ... give a smaller
    batch_size, steps or trials", naming no file and keys a DLIO YAML does not have."""
    if batch * 2 * steps >= 2**63:  # one epoch (and the warm-up epoch) alone
        scaled = f" (at --scale {scale:g})" if scale != 1 else ""
        raise ConfigError(
            f"{path}: dataset.num_files_train x num_samples_per_file makes epochs of "
            f"{samples:,} samples{scaled}, past 2**63, the most a run can number (sample "
            "numbers are int64): give a train.total_training_steps (DLIO stops each epoch "
            f"there), a {'smaller --scale' if scaled else '--scale below 1'}, or a smaller "
            "num_files_train or num_samples_per_file"
        )
    if batch * (1 + epochs) * steps >= 2**63:
        raise ConfigError(
            f"{path}: train.epochs {epochs:,} and a warm-up epoch, of {_n(steps, 'step')} of "
            f"{_n(batch, 'sample')}, are {(1 + epochs) * steps * batch:,} samples, past 2**63, "
            "the most a run can number "
            "(sample numbers are int64): give fewer train.epochs"
        )


def dlio_workload(
    path: str,
    *,
    scale: float = 1.0,
    record_scale: float = 1.0,
    steps: int | None = None,
    batch_size: int | None = None,
) -> Workload:
    """The headrace workload equivalent to DLIO's YAML at ``path``, scaled.

    ``steps`` replaces the steps of a trial (one DLIO epoch by default); ``batch_size``
    the YAML's ``reader.batch_size``, before the epoch's steps are worked out from it.
    """
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - pyyaml is in the test extra
        raise ConfigError("--dlio needs PyYAML: pip install pyyaml") from exc
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.load(f, Loader=_loader(yaml))  # a SafeLoader
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        # PyYAML's messages span lines (the mark, then the problem): one line here.
        why = " ".join(str(exc).split()) if str(exc) else type(exc).__name__
        raise ConfigError(f"{path}: not valid YAML ({why})") from None
    if isinstance(doc, dict) and "dataset" not in doc and isinstance(doc.get("workload"), dict):
        doc = doc["workload"]  # a DLIO run's own record of its config (.hydra/config.yaml)
    if isinstance(doc, dict) and "dataset" not in doc and isinstance(doc.get("workflow"), dict):
        # DLIO's llama_1t.yaml: checkpointing, no dataset section. It is a DLIO config
        # (it was refused as "not a DLIO workload"); DLIO would read its defaults.
        why = (
            "it is for checkpointing (workflow.checkpoint), which headrace does not model; "
            if doc["workflow"].get("checkpoint")
            else ""
        )
        raise ConfigError(
            f"{path}: no dataset section: DLIO would train on its defaults (8 tfrecord files "
            f"of one 65,536 B record, no compute); {why}give a dataset section "
            "(format, num_files_train, num_samples_per_file, record_length_bytes) to measure "
            "the reading of a dataset"
        )
    if not isinstance(doc, dict) or "dataset" not in doc:
        raise ConfigError(f"{path}: not a DLIO workload (expected a mapping with 'dataset')")
    ds, rd, tr, metric, storage, workflow = (
        _section(doc, name, path)
        for name in ("dataset", "reader", "train", "metric", "storage", "workflow")
    )
    # Messages name the section the reader keys were read from (data_reader where given).
    rname = "data_reader" if "data_reader" in doc else "reader"
    if workflow.get("train") is False:
        raise ConfigError(
            f"{path}: workflow.train is false: DLIO reads no data then (data generation or "
            "checkpointing only); headrace bench --dlio runs training workloads"
        )
    # DLIO's default format is tfrecord (its ConfigArguments), as cosmoflow.yaml relies on.
    given = str(ds.get("format", "tfrecord"))
    fmt = given.removeprefix(_LEGACY)
    if fmt not in _FORMATS and fmt not in _RAW:
        # DLIO's Parquet rows (dlrm_s3dlio_*.yaml): headrace's own workload reads Parquet.
        hint = (
            "; for Parquet rows run headrace's own workload, headrace bench -w parquet "
            "(--storage s3 for an object store)"
            if fmt == "parquet"
            else ""
        )
        raise ConfigError(
            f"{path}: dataset.format {given!r} is not supported: headrace reads "
            f"{', '.join(list(_FORMATS)[:-1])} and {list(_FORMATS)[-1]}, and "
            f"{', '.join(sorted(_RAW)[:-1])} and {sorted(_RAW)[-1]} as fixed-size raw records"
            f"{hint}"
        )
    if scale <= 0 or record_scale <= 0:
        raise ConfigError(f"scale and record_scale must be > 0 (got {scale}, {record_scale})")
    where = f"{path}: dataset"
    # Not "record_length_std" (resnet50_h100/_v100.yaml): DLIO never reads it and makes
    # records of one size; read here, 115 kB records were 14 kB (23% of them) to 430 kB.
    stdev = _number(ds, ("record_length_bytes_stdev", "record_length_stdev"), 0, where)
    record, dims_note = _record(ds, where, fmt, stdev)
    if record < 1:  # records of no bytes: nothing to read, and no --record-scale helps
        # (0.4 was "--record-scale 1 makes the dataset's 0 B records 0.4 B", a flag never
        # typed; record_length: 0 named record_length_bytes, a key the YAML does not have)
        key = next((k for k in ("record_length_bytes", "record_length") if k in ds), "")
        raise ConfigError(
            f"{where}.{key or 'record_length_bytes'} must be at least 1 (a byte; got {record:g})"
        )
    if record * record_scale < 1:
        # Made 1 byte, as the compute time went on shrinking: UNet3D at 1e-9 asked
        # 9,947 GB/s per accelerator of a workload that asks 3 GB/s.
        raise ConfigError(
            f"{path}: --record-scale {record_scale:g} makes the dataset's {record:,.0f} B "
            f"records {record * record_scale:.2g} B, less than a byte: give --record-scale "
            f">= {1 / record:.3g}"
        )
    if record * record_scale > _MAX_NUMBER:
        # Was "<yaml> [dataset]: record_bytes = 146600628000000000000: expected a number, at
        # most 2**53": a TOML key the YAML's user never wrote, and no word of the flag.
        raise ConfigError(
            f"{path}: --record-scale {record_scale:g} makes the dataset's {record:,.0f} B "
            f"records {record * record_scale:.3g} B, past 2**53, the most a size may be "
            f"here: give a smaller --record-scale (at most {_MAX_NUMBER / record:.3g})"
        )
    batch = _positive(rd, "batch_size", 1, f"{path}: {rname}")
    # --batch-size: an epoch is then floor(samples / that) steps (it kept the YAML's
    # count, and a trial of "one epoch" covered two at twice the batch).
    batch_note = ""
    if batch_size is not None and batch_size != batch:
        batch_note = f"; batch {batch_size} (--batch-size; the YAML's {batch})"
        batch = batch_size
    # DLIO's default is 8 files (its ConfigArguments); 1 here made a YAML without the key
    # (or with it misspelt) another dataset.
    dlio_files = _positive(ds, "num_files_train", 8, where)
    dlio_per_file = per_file = _positive(ds, "num_samples_per_file", 1, where)
    if fmt in ("jpeg", "png") and per_file > 1:
        raise ConfigError(
            f"{where}.num_samples_per_file {per_file} with format {given!r}: an image file "
            "holds one sample (1, or npz/npy/hdf5 for several)"
        )
    if dlio_files * scale > _MAX_NUMBER:
        # Was "<yaml> [dataset]: files = 168000000000000000: expected a number, at most
        # 2**53" (a TOML key), or round()'s OverflowError where the product is infinite.
        raise ConfigError(
            f"{path}: --scale {scale:g} makes the dataset's {dlio_files:,} files "
            f"(num_files_train) {dlio_files * scale:.3g}, past 2**53, the most a count may be "
            f"here: give a smaller --scale (at most {_MAX_NUMBER / dlio_files:.3g})"
        )
    files = round(dlio_files * scale)
    if dlio_files * scale < 1:
        # Less than a file: the one file holds that share of the samples (DLIO's LLM and
        # DLRM configs are one file of 1 M to 4.2 G records; kept whole, a --scale run
        # wrote all of them).
        files = 1
        per_file = min(per_file, max(batch, round(dlio_files * per_file * scale)))
    grown = ""
    if files * per_file < batch:
        # An epoch of fewer samples than a batch has no step (DLIO's floor): made a batch
        # of files, and said so (the plan read "files x0.01" over 7 files where the YAML
        # at that scale has 2).
        grown = (
            f"; {_n(-(-batch // per_file), 'file')}, not {files:,}: the scaled epoch of "
            f"{files * per_file:,} samples holds no batch of {batch} (DLIO: no step)"
        )
        files = -(-batch // per_file)
    model = doc.get("model")
    name = model.get("name") if isinstance(model, dict) else model
    # DLIO's model.name is a label ("meta-llama/Llama-2-7b" runs); here it begins the
    # dataset's folder under --root, which refused a '/' with a message about a TOML key.
    stem = os.path.splitext(os.path.basename(path))[0]
    name = re.sub(r"[/\\\0]", "_", str(name or stem))
    if not name.strip("."):  # "..": no folder name either
        name = re.sub(r"[\\\0]", "_", stem).strip(".") or "dlio"
    stype = str(storage.get("storage_type", "local_fs"))
    # DLIO's steps per epoch (one host): floor(samples / batch), of the scaled dataset.
    epochs = _positive(tr, "epochs", 1, f"{path}: train")
    epoch_steps = files * per_file // batch
    trial_steps = epoch_steps
    # DLIO stops where the step count equals total_training_steps: its -1 (the default),
    # or any value <= 0, is no limit, every step of the epoch.
    limit = tr.get("total_training_steps", -1)
    no_limit = limit is None or (
        isinstance(limit, int) and not isinstance(limit, bool) and limit <= 0
    )
    total = -1 if no_limit else _positive(tr, "total_training_steps", 1, f"{path}: train")
    if total > 0:  # DLIO stops each epoch there
        trial_steps = min(epoch_steps, max(1, round(total * scale)))
    plan = f"{_n(epochs, 'epoch')} of {_n(trial_steps, 'step')}"
    if trial_steps < epoch_steps:
        plan += f" (total_training_steps {total} x{scale:g}; an epoch has {epoch_steps:,})"
    plan += grown
    if per_file < dlio_per_file:
        plan += (
            f"; 1 file of {per_file:,} samples (DLIO: {_n(dlio_files, 'file')} of "
            f"{dlio_per_file:,})"
        )
    _refuse_past_int64(path, files * per_file, batch, epochs, steps or trial_steps, scale)
    compute, compute_stdev = _time(tr, "computation_time", path)
    # DLIO's seed is train.seed; reader.seed is this mapping's earlier spelling.
    seed_section, seed_where = (tr, "train") if "seed" in tr else (rd, rname)
    train = TrainConfig(
        batch_size=batch,
        steps=steps or trial_steps,
        trials=epochs,
        # An untimed epoch (a trial's steps; --steps N: N) before the timed trials, each
        # variant's in turn: its first trial then begins as the later ones do, after the
        # other variants ran one. After one step, a read-ahead variant's trial 1 began
        # from a queue barely started, the later ones from a queue filled while the others
        # ran theirs: the slowest of 5 in 14 of 16 variants' runs, 0.17-0.89x the later
        # ones' median (UNet3D --scale 1 --record-scale 0.01, 2c, 2026-12-07); after an
        # epoch, in 2 of 16 (chance: 3.2), and trial 1 is no longer set apart.
        warmup_steps=steps or trial_steps,
        computation_time=compute * record_scale,
        computation_time_stdev=compute_stdev * record_scale,
        au_threshold=_au(metric, path),
        seed=int(_number(seed_section, ("seed",), 0, f"{path}: {seed_where}")),
    )
    # Fixed-size records without a decoder here become NPY arrays of records
    # (read whole, like DLIO's readers); one record per file stays raw bytes.
    out_fmt = _FORMATS.get(fmt) or ("raw" if per_file == 1 else "npy")
    one = per_file == 1
    dataset: dict[str, Any] = {
        "format": out_fmt,
        "files": files,
        "samples_per_file": per_file,
        "record_bytes": max(1, round(record * record_scale)),
    }
    image_note = ""
    if out_fmt in ("jpeg", "png"):
        # DLIO writes sqrt(record) x sqrt(record) grey noise, stored at about a record;
        # left at the kind's 640 x 640, ResNet-50's 115 kB PNGs were 1.2 MB, at any
        # --record-scale.
        # An image's record is its side: its stored size is measured from one encoded.
        side = _image_side(out_fmt, dataset.pop("record_bytes"))
        most = most_pixels()
        if most is not None and side * side > most:
            # Generated, the image took all memory; the decoders refuse it (a bomb).
            scaled = f" (x --record-scale {record_scale:g})" if record_scale != 1 else ""
            raise ConfigError(
                f"{where}.record_length_bytes {record:g}{scaled} makes {fmt} images of "
                f"{side:,} x {side:,} pixels, more than the decoders take ({most:,}: twice "
                "PIL.Image.MAX_IMAGE_PIXELS): give a smaller record_length_bytes (at most "
                f"about {record * most / (side * side) / record_scale:.3g})"
            )
        dataset["image_hw"] = [side, side]
        if stdev:  # every image here is image_hw in size
            image_note = f"; record stdev {stdev:g} not modelled: images are all {side}x{side}"
    else:
        dataset["record_bytes_stdev"] = round(stdev * record_scale)
    # read_threads decode, and twice as many fetch. The batches DLIO's data loader queues
    # are the Loader's prefetch, not reads in flight (as in_flight, ResNet-50's 2 with 8
    # read threads fetched 2 files at a time); left to the kind's 8, UNet3D queued 8 x 7 x
    # 147 MB. DLIO's default prefetch_size is 2.
    threads, threads_note = _threads(rd, f"{path}: {rname}")
    prefetch, prefetch_note = _prefetch(rd, f"{path}: {rname}", threads)
    storage_keys, storage_note = _storage(path, stype, storage, str(ds.get("data_folder") or name))
    reader: dict[str, Any] = {
        "in_flight": 2 * threads,
        "decode_threads": threads,
        "prefetch": prefetch,
        **storage_keys,
    }
    if rd.get("odirect"):
        reader["odirect"] = True
    prep, prep_stdev = _time(rd, "preprocess_time", path, rname)
    if prep or prep_stdev:  # simulated work per sample, scaled as the compute time is
        reader["preprocess_time"] = prep * record_scale
        reader["preprocess_time_stdev"] = prep_stdev * record_scale
    shown = given if out_fmt == given else f"{given} as {out_fmt}"
    ignored = not_modelled(doc)
    unknown = unknown_keys(doc)
    return Workload(
        name=name,
        kind="files",
        description=(
            f"DLIO {os.path.basename(path)}: {plan}, one epoch per trial; {shown}; "
            f"files x{scale:g}, records x{record_scale:g}{batch_note}{dims_note}{image_note}"
            f"{threads_note}{prefetch_note}"
            f"{storage_note}"
            + (f"; not modelled: {', '.join(ignored)}" if ignored else "")
            + (
                f"; keys DLIO does not read (ignored, as DLIO ignores them): {', '.join(unknown)}"
                if unknown
                else ""
            )
        ),
        source=path,
        dataset=dataset,
        reader=reader,
        train=train,
        variants=(
            ("map-style", "iterable", "headrace", "headrace-raw", "ceiling")
            if one
            else ("map-style", "iterable", "headrace")
        ),
    )
