"""``headrace emulate EMULATOR ...``: run one slow-storage emulator in the foreground.

Each emulator is one entry in :data:`EMULATORS`, naming a module that provides
``configure(parser)`` and ``run(args) -> int``. Every module is imported while
the parser is built, so keep their top-level imports light: import heavy or
optional dependencies (mfusepy, moto) inside ``run``. To add ``headrace emulate
s3``, write ``headrace/emulate/_s3.py`` with those two functions and add one line
here.
"""

from __future__ import annotations

import argparse
import importlib

__all__ = ["EMULATORS", "check", "configure", "run"]

# name -> (module, one-line help)
EMULATORS: dict[str, tuple[str, str]] = {
    "slowfs": (
        "headrace.emulate._slowfs",
        "read-only FUSE passthrough of a directory with injected latency and bandwidth cap",
    ),
    "s3": (
        "headrace.emulate._s3",
        "a local S3 endpoint (moto) on 127.0.0.1, optionally behind a latency proxy",
    ),
}


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="emulator", metavar="EMULATOR", required=True)
    for name, (module_name, help_text) in EMULATORS.items():
        module = importlib.import_module(module_name)
        module.configure(sub.add_parser(name, help=help_text, description=help_text))


def check(args: argparse.Namespace) -> None:
    """The emulator's ``check(args)``, where it has one: what it refuses before it
    mounts or listens (:func:`headrace.cli.check`)."""
    module = importlib.import_module(EMULATORS[args.emulator][0])
    validate = getattr(module, "check", None)
    if validate is not None:
        validate(args)


def run(args: argparse.Namespace) -> int:
    module = importlib.import_module(EMULATORS[args.emulator][0])
    return int(module.run(args))
