"""The command-line values ``headrace bench`` and ``headrace gen`` check before they
read a workload: ranges, ``--sweep``, ``--accelerators``, the dataset size flags
(``--files``, ``--token-file-gib``, ``--scale``) against the workloads that take them,
and the mount settings of ``--storage slowfs``."""

from __future__ import annotations

import argparse
import math
from typing import Any

from headrace.bench._workload import Workload
from headrace.emulate import SlowFSConfig
from headrace.errors import ConfigError

__all__ = [
    "check_ranges",
    "parse_accelerators",
    "parse_sweep",
    "refuse_scales_without_dlio",
    "refuse_workloads_with_dlio",
    "refuse_unused_sizes",
    "size_changes",
    "slowfs_config",
]


# (flag, attribute, least value, whether the least is allowed, example): the options whose
# range a run (and --list) refuses before it reads a workload.
_RANGES: tuple[tuple[str, str, float, bool, str], ...] = (
    ("--steps", "steps", 1, True, "100"),
    ("--trials", "trials", 1, True, "3"),
    ("--warmup", "warmup", 0, True, "10"),
    ("--batch-size", "batch_size", 1, True, "32"),
    ("--files", "files", 1, True, "64"),
    ("--max-concurrent", "max_concurrent", 1, True, "16"),
    ("--scale", "scale", 0, False, "0.1"),
    ("--record-scale", "record_scale", 0, False, "0.01"),
    ("--token-file-gib", "token_file_gib", 0, False, "0.25"),
    ("--latency-ms", "latency_ms", 0, True, "20"),
    ("--open-latency-ms", "open_latency_ms", 0, True, "10"),
)

#: ``--storage slowfs`` without ``--latency-ms``: without a delay slowfs is FUSE's own cost
#: only; 10 ms is the emulator's documented example (a NFS server in the same rack answers
#: in under 1 ms, a FUSE driver over object storage in tens).
SLOWFS_LATENCY_MS = 10.0


def check_ranges(args: argparse.Namespace) -> None:
    for flag, attr, least, inclusive, example in _RANGES:
        v = getattr(args, attr, None)
        if v is None:
            continue
        # Written "not (v >= least)" so that NaN is refused too.
        if not (v >= least if inclusive else v > least) or v == math.inf:
            what = "a whole number" if isinstance(v, int) else "a number"
            shown = f"{v:g}" if isinstance(v, float) else str(v)
            raise ConfigError(
                f"{flag} {shown}: expected {what} {'>=' if inclusive else '>'} {least}, "
                f"e.g. {flag} {example}"
            )


def parse_sweep(text: str) -> tuple[str, list[str]]:
    """``KEY=V1,V2,...`` -> (key, values); refused with the expected form otherwise."""
    key, eq, values = text.partition("=")
    key = key.strip()  # "in_flight=1, 8": the spaces are no part of a key or value
    given = [v.strip() for v in values.split(",")]
    vals = [v for v in given if v]
    if not eq or not key or not vals or any(c in key for c in "?&,"):
        raise ConfigError(
            f"--sweep {text!r}: expected KEY=V1,V2,... with a key and at least one value, "
            "e.g. --sweep in_flight=1,8,32"
        )
    if len(vals) < len(given):
        # "prefetch=1,,2" ran prefetch=1 and 2 without a word: a value typed between the
        # commas, and lost, read as swept.
        raise ConfigError(
            f"--sweep {text!r}: value {given.index('') + 1} of {len(given)} is empty (two "
            f"commas in a row, or one at an end); give each value, e.g. --sweep "
            f"{key}={','.join(vals)}"
        )
    joined = [v for v in vals if any(c in v for c in "?&")]
    if joined:
        # Each value goes into the variant as "?KEY=VALUE": "1&prefetch=0" set prefetch
        # for that point of the sweep alone, without a word.
        raise ConfigError(
            f"--sweep {text!r}: value {joined[0]!r} holds '?' or '&', which would set "
            f"more than one option; a sweep varies one option, e.g. --sweep "
            f"{key}=1,8 (set the others in --variants, e.g. headrace?prefetch=0)"
        )
    repeated = sorted({v for v in vals if vals.count(v) > 1})
    if repeated:
        raise ConfigError(
            f"--sweep {text!r}: value {repeated[0]!r} is given more than once; give each "
            "value once (more runs: --trials)"
        )
    return key, vals


def parse_accelerators(text: str) -> int | None:
    """``--accelerators``: a count >= 1, or ``auto`` (returned as None)."""
    if text == "auto":
        return None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(
            f"--accelerators {text!r}: expected a whole number >= 1 or 'auto', "
            "e.g. --accelerators 8"
        )
    return n


_TOKEN_KINDS = ("tokens", "megatron")
_FILE_KINDS = ("files", "parquet")


def size_changes(wl: Workload, args: argparse.Namespace) -> dict[str, Any]:
    """The ``[dataset]`` changes of ``--files`` and ``--token-file-gib`` for ``wl``."""
    dataset: dict[str, Any] = {}
    # Each dataset flag goes to the kinds that have the setting (-w tokens -w padded
    # --token-file-gib 1 sizes the token file only); refuse_unused_sizes refuses one
    # nobody takes.
    if getattr(args, "token_file_gib", None) is not None and wl.kind in _TOKEN_KINDS:
        dataset["token_file_gib"] = args.token_file_gib
    if getattr(args, "files", None) is not None and wl.kind in _FILE_KINDS:
        dataset["files"] = args.files
    return dataset


def refuse_unused_sizes(workloads: list[Workload], args: argparse.Namespace) -> None:
    """Refuse ``--files`` / ``--token-file-gib`` where no workload has that setting."""
    if getattr(args, "dlio", None) and getattr(args, "files", None) is not None:
        # A DLIO workload is of the files kind, so --files was taken: it replaced the
        # file count under a plan ("one epoch per trial") worked out from the YAML's.
        raise ConfigError(
            f"--files {args.files}: a --dlio workload has the YAML's num_files_train, "
            "scaled by --scale (with its epochs and steps): use --scale, and drop --files"
        )
    for flag, attr, kinds, names in (
        ("--token-file-gib", "token_file_gib", _TOKEN_KINDS, "tokens, megatron"),
        ("--files", "files", _FILE_KINDS, "jpeg, npz, hdf5, parquet"),
    ):
        if getattr(args, attr, None) is not None and not any(w.kind in kinds for w in workloads):
            raise ConfigError(
                f"{flag} sizes the {names} workloads; "
                f"{', '.join(repr(w.name) for w in workloads)} "
                f"{'takes' if len(workloads) == 1 else 'take'} none: drop it"
            )


def refuse_scales_without_dlio(args: argparse.Namespace) -> None:
    """``--scale`` / ``--record-scale`` size a ``--dlio`` workload only."""
    if args.dlio:
        return
    given = [
        f
        for f, a in (("--scale", "scale"), ("--record-scale", "record_scale"))
        if getattr(args, a, None) is not None
    ]
    if given:
        # gen has no --steps: its message named a flag it refuses.
        sizes = (
            "--files, --token-file-gib or --steps"
            if hasattr(args, "steps")
            else ("--files or --token-file-gib")
        )
        raise ConfigError(
            f"{' and '.join(given)} scale{'s' if len(given) == 1 else ''} a --dlio "
            f"workload and nothing else: drop it, or size a built-in workload with {sizes}"
        )


def refuse_workloads_with_dlio(args: argparse.Namespace) -> None:
    """``bench --dlio YAML -w NAME``: a run reads the one or the other. The ``-w``
    workloads were left out without a word, and the report had the YAML's alone."""
    if args.dlio and args.workload:
        named = " ".join(f"-w {w}" for w in args.workload)
        raise ConfigError(
            f"got {named} and --dlio {args.dlio!r}: a run reads a --dlio YAML or -w "
            "workloads, not both; drop one, or run them as two commands (each with "
            "--json) and put them side by side with 'headrace bench compare A.json B.json'"
        )


def slowfs_config(args: argparse.Namespace) -> SlowFSConfig | None:
    """The mounts of ``--storage slowfs`` (``None`` for other storage): ``--latency-ms``
    per READ (default 10), ``--open-latency-ms`` per open (default: the READ's)."""
    if getattr(args, "storage", None) != "slowfs":
        if getattr(args, "open_latency_ms", None) is not None:
            raise ConfigError(
                "--open-latency-ms is the delay of every open on a --storage slowfs mount: "
                "add --storage slowfs, or drop it"
            )
        return None
    given = [
        flag
        for flag, attr in (
            ("--storage-url", "storage_url"),
            ("--endpoint", "endpoint"),
            ("--max-concurrent", "max_concurrent"),
            ("--store-option", "store_option"),
        )
        if getattr(args, attr, None) not in (None, [])
    ]
    if given:
        one = len(given) == 1
        raise ConfigError(
            f"{' and '.join(given)} {'is' if one else 'are'} for --storage s3; --storage "
            "slowfs reads the --root dataset through a local FUSE mount (--latency-ms per "
            f"READ, --open-latency-ms per open): drop {'it' if one else 'them'}"
        )
    read = SLOWFS_LATENCY_MS if args.latency_ms is None else float(args.latency_ms)
    opened = read if args.open_latency_ms is None else float(args.open_latency_ms)
    return SlowFSConfig(read_latency_ms=read, open_latency_ms=opened)
