"""The workloads a ``headrace bench`` command line names, with its flags applied:
``-w`` names or ``--dlio``, ``--steps``/``--batch-size``..., the S3 flags as ``[reader]``
keys, ``--variants`` and ``--sweep``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from headrace._store_option import store_options as parse_store_options
from headrace.bench._args import parse_sweep, refuse_unused_sizes, size_changes, slowfs_config
from headrace.bench._kind import VariantSpec
from headrace.bench._workload import Workload, load_workload, refuse_bad_variants
from headrace.errors import ConfigError

__all__ = ["S3_KINDS", "dlio_from_args", "override", "storage_options", "workloads"]

#: The kinds that read their dataset from S3 (``--storage s3``); padded rows, Arrow
#: tables and packed sequences are read locally only.
S3_KINDS = ("files", "tokens", "megatron", "parquet", "table-images")


#: The ``[train]`` key each flag sets: (key, attribute, flag).
_TRAIN = (
    ("steps", "steps", "--steps"),
    ("trials", "trials", "--trials"),
    ("warmup_steps", "warmup", "--warmup"),
    ("batch_size", "batch_size", "--batch-size"),
)

#: The flag of each ``[dataset]`` and ``[reader]`` key a flag of the same name sets.
_FLAGS = {
    "files": "--files",
    "token_file_gib": "--token-file-gib",
    "storage": "--storage",
    "storage_url": "--storage-url",
    "endpoint": "--endpoint",
    "latency_ms": "--latency-ms",
    "max_concurrent": "--max-concurrent",
}


def override(wl: Workload, args: argparse.Namespace) -> Workload:
    """``wl`` as the command line changes it: ``[train]`` from --steps, --trials, --warmup
    and --batch-size, ``[dataset]`` sizes, the S3 flags, --variants, then --sweep."""
    train: dict[str, Any] = {}
    for key, attr, _ in _TRAIN:
        v = getattr(args, attr, None)
        if v is not None:
            train[key] = v
    changes: dict[str, Any] = {}
    if train:
        changes["train"] = train
        if wl.description.startswith("DLIO ") and "steps" in train:
            # The plan read "one epoch per trial" beside --steps 8 over epochs of 1 step.
            n = train["steps"]
            # Its warm-up is a trial's steps (_dlio.py), --steps N's too, unless --warmup.
            train.setdefault("warmup_steps", n)
            if n != wl.train.steps:
                changes["description"] = wl.description.replace(
                    ", one epoch per trial;",
                    f", trials of {n} steps (--steps {n}), not one epoch;",
                    1,
                )
    dataset = size_changes(wl, args)
    if dataset:
        changes["dataset"] = dataset
    reader = storage_options(args)
    storage = getattr(args, "storage", None)
    # --storage local on a workload that names where on S3 it reads (a DLIO s3 YAML's
    # bucket and endpoint) was "['storage_url', 'endpoint'] need storage = 's3' (--storage
    # s3)", said of the flag just typed; without them, --storage local reads it locally.
    located = any(wl.reader.get(k) for k in ("storage_url", "endpoint"))
    if (storage == "slowfs" or (storage == "local" and located)) and wl.reader.get(
        "storage", "local"
    ) != "local":
        via = " through a FUSE mount" if storage == "slowfs" else ""
        raise ConfigError(
            f"workload {wl.name!r} reads its dataset from {wl.reader['storage']} "
            f"([reader] storage = {wl.reader['storage']!r}); --storage {storage} reads a local "
            f"dataset under --root{via}: run it with --storage s3, or give a workload whose "
            "dataset is local"
        )
    if reader:
        if wl.kind not in S3_KINDS:
            raise ConfigError(
                f"workload {wl.name!r} (kind {wl.kind!r}): --storage, --storage-url, "
                "--endpoint, --latency-ms and --max-concurrent apply to the workloads that read "
                "S3: jpeg, npz, hdf5, tokens, megatron, parquet, hub-images and --dlio"
            )
        changes["reader"] = reader
        if wl.kind in ("tokens", "megatron") and reader.get("storage") == "s3":
            s3 = _tokens_on_s3(wl, args, reader)
            if "dataset" in s3:  # merged: --files (refused for tokens) is not dropped
                s3["dataset"] = {**changes.get("dataset", {}), **s3["dataset"]}
            changes.update(s3)
    if getattr(args, "variants", None) is not None:
        # "naive, headrace-sync" (a space after the comma) was "unknown variant
        # ' headrace-sync'"; --variants "" ran every variant, and "," blamed the TOML file.
        given = tuple(v.strip() for v in args.variants.split(","))
        if not any(given):
            raise ConfigError(
                f"--variants {args.variants!r}: name at least one variant, comma-separated, "
                f"e.g. --variants {','.join(wl.variants[:2])} (bench --list shows them)"
            )
        # (the file's own check would name the workload's file for what the flag said)
        refuse_bad_variants(given, f"--variants {args.variants!r}")
        changes["variants"] = given
    flags = {
        name: {
            k: _FLAGS[k]
            for k in changes.get(name, {})
            if k in _FLAGS and getattr(args, k, None) is not None
        }
        for name in ("dataset", "reader")
    }
    if any(flags.values()):
        changes["flags"] = flags
    try:
        wl = wl.replace(**changes) if changes else wl
    except ConfigError as exc:
        if not train:
            raise
        # [train] as the flags set it: "train: batch_size x ..." named no flag typed.
        typed = " ".join(
            f"{flag} {getattr(args, attr)}"
            for _, attr, flag in _TRAIN
            if getattr(args, attr, None) is not None
        )
        raise ConfigError(f"{wl.where}: {typed}: {exc}") from exc
    if getattr(args, "sweep", None):
        key, values = parse_sweep(args.sweep)
        specs = []
        for v in wl.variants:
            own = VariantSpec.parse(v).options.get(key)
            if own is not None:
                # "headrace-sync?seed=5" under --sweep seed=0 ran "headrace-sync?seed=5&seed=0"
                # (the last wins): seed 0 under the name of seed 5, or the sweep undone.
                raise ConfigError(
                    f"--sweep {args.sweep!r}: variant {v!r} of workload {wl.name!r} sets "
                    f"{key}={own} itself, and the sweep would replace it: drop {key} from "
                    f"the variant, or sweep another key"
                )
            for value in values:
                sep = "&" if "?" in v else "?"
                specs.append(f"{v}{sep}{key}={value}")
        wl = wl.replace(variants=tuple(specs))
    return wl


def storage_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``[reader]`` keys of the S3 flags (``{}`` for ``--storage slowfs``: the run's
    mounts are no workload's setting, and every kind reads them as local files)."""
    if slowfs_config(args) is not None:
        return {}
    reader: dict[str, Any] = {}
    if getattr(args, "storage", None):
        reader["storage"] = args.storage
    for key in ("storage_url", "endpoint", "latency_ms", "max_concurrent"):
        if getattr(args, key, None) is not None:
            reader[key] = getattr(args, key)
    if getattr(args, "store_option", None):
        reader["store_options"] = parse_store_options(args.store_option)
    if reader and reader.get("storage", "s3") != "s3" and len(reader) > 1:
        raise ConfigError(
            "--storage-url, --endpoint, --store-option, --latency-ms and --max-concurrent "
            "need --storage s3"
        )
    if len(reader) > int("storage" in reader):
        reader["storage"] = "s3"  # an S3 option implies S3
    return reader


# A token file on a local S3 emulator: moto reads the whole object for every ranged
# GET, so a 1 GiB object would cost ~0.7 s per 4 MiB block.
_S3_TOKEN_GIB = 0.0625
_S3_WINDOW_MIB = 16


def _tokens_on_s3(wl: Workload, args: argparse.Namespace, reader: dict[str, Any]) -> dict[str, Any]:
    """A token workload read from S3: its headrace variants, and on moto a 64 MiB file."""
    from headrace.bench._storage import CLOUD_SCHEMES
    from headrace.bench._tokens_kind import LOCAL_ONLY

    changes: dict[str, Any] = {}
    notes = []
    if not getattr(args, "variants", None):
        kept = tuple(v for v in wl.variants if v.partition("?")[0] not in LOCAL_ONLY)
        dropped = [v for v in wl.variants if v not in kept]
        if dropped:
            changes["variants"] = kept
            notes.append(f"left out {', '.join(dropped)} (they read the local file)")
    url = str(reader.get("storage_url") or wl.reader.get("storage_url") or "")
    on_moto = not reader.get("endpoint") and url.partition("://")[0] not in CLOUD_SCHEMES
    if on_moto and getattr(args, "token_file_gib", None) is None:
        changes["dataset"] = {"token_file_gib": _S3_TOKEN_GIB}
        reader["window_mib"] = min(float(wl.reader.get("window_mib", 256)), _S3_WINDOW_MIB)
        notes.append(
            f"token file of {_S3_TOKEN_GIB * 1024:g} MiB in {reader['window_mib']:g} MiB windows "
            "(the local S3 emulator reads a whole object per ranged GET; --token-file-gib "
            "sets the size)"
        )
    for note in notes:
        print(f"{wl.name} on S3: {note}", file=sys.stderr)
    return changes


def workloads(args: argparse.Namespace) -> list[Workload]:
    """The workloads ``-w`` names (default ``tokens``) or ``--dlio`` reads, with overrides."""
    workloads = _named_workloads(args)
    refuse_unused_sizes(workloads, args)
    return workloads


def _named_workloads(args: argparse.Namespace) -> list[Workload]:
    if args.dlio:
        return [override(dlio_from_args(args), args)]
    workloads = [override(load_workload(n), args) for n in args.workload or ["tokens"]]
    names = [w.name for w in workloads]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        # Results, notes and `bench compare` go by workload name: `-w tokens -w tokens`
        # ran it twice, into rows no one could tell apart.
        raise ConfigError(
            f"workload {twice[0]!r} is named more than once (-w {' -w '.join(args.workload)}): "
            "a report keys its results by workload name; give each once (more runs: "
            "--trials), or give a workload file another name = ..."
        )
    return workloads


def dlio_from_args(args: argparse.Namespace) -> Workload:
    """The workload of ``--dlio YAML`` at ``--scale`` and ``--record-scale``."""
    from headrace.bench._dlio import dlio_workload, resolve_dlio

    return dlio_workload(
        resolve_dlio(args.dlio),
        scale=1.0 if args.scale is None else args.scale,
        record_scale=1.0 if args.record_scale is None else args.record_scale,
        batch_size=getattr(args, "batch_size", None),
    )
