"""``headrace gen WORKLOAD --root DIR``: write a workload's dataset, resumably."""

from __future__ import annotations

import argparse
import sys

from headrace.bench._cli import _progress, default_root, prepare_root
from headrace.bench._kind import make_kind
from headrace.bench._workload import load_workload
from headrace.errors import HeadraceError

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help="built-in workload name or TOML path")
    parser.add_argument("--root", default=None, help=f"dataset folder (default: {default_root()})")
    parser.add_argument("--quiet", "-q", action="store_true")


def run(args: argparse.Namespace) -> int:
    try:
        kind = make_kind(load_workload(args.workload), prepare_root(args.root or default_root()))
        with _progress(args.quiet) as progress:

            def step(done: int, total: int) -> None:
                if progress:
                    progress(f"gen {kind.workload.name}", done, total)

            kind.generate(step)
    except HeadraceError as exc:
        print(f"headrace gen: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, a folder removed under the run
        print(f"headrace gen: {exc}", file=sys.stderr)
        return 2
    print(
        f"{kind.workload.name}: {len(kind.files())} files, {kind.dataset_bytes():,} bytes "
        f"under {kind.root}"
    )
    return 0
