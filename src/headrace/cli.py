"""The ``headrace`` command.

Each sub-command lives in its own module, imported only when it runs, so
``headrace --help`` stays fast and optional extras stay optional. A module
provides ``configure(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import platform
import re
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from types import FrameType

from headrace import __version__, errors
from headrace._messages import said as _said

__all__ = ["COMMANDS", "check", "command_parser", "main"]

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("headrace.bench._cli", "run benchmark workloads side by side"),
    "gen": ("headrace.bench._gen_cli", "write a workload's dataset"),
    "probe": ("headrace.bench._probe", "measure a path's storage before training"),
    "emulate": ("headrace.emulate._cli", "run slow-storage emulators (slowfs, s3)"),
    "cache": ("headrace._cache_cli", "show or prune a local object cache (cache_dir)"),
    "check": ("headrace._check_cli", "read a dataset once and list every sample that fails"),
}


#: A line break and the indentation around it, in a message printed as one line.
_LINE_BREAKS = re.compile(r"\s*\n\s*")


def command_parser(
    name: str, parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser
) -> argparse.ArgumentParser:
    """The parser of ``headrace NAME``, built as :func:`main` builds it; nothing runs.

    For tools that read command lines without running them (the tests check every
    command the documentation shows): ``parser_class`` may, say, raise instead of
    exiting on a usage error; sub-parsers (``headrace emulate slowfs``) are of it too.
    """
    if name not in COMMANDS:
        raise KeyError(f"no command {name!r}; the commands are {sorted(COMMANDS)}")
    module = importlib.import_module(COMMANDS[name][0])
    parser = parser_class(prog=f"headrace {name}", description=COMMANDS[name][1])
    module.configure(parser)
    return parser


def check(name: str, args: argparse.Namespace) -> None:
    """Refuse what ``headrace NAME`` refuses before it does anything, as its ``run``
    would: the command module's ``check(args)``, where it has one (it reads no data,
    writes nothing and connects to nothing). Raises :class:`headrace.errors.HeadraceError`.
    """
    module = importlib.import_module(COMMANDS[name][0])
    validate = getattr(module, "check", None)
    if validate is not None:
        validate(args)


class _Terminated(SystemExit):
    """SIGTERM, raised in the main thread (exit status 143, as a shell reports it)."""


@contextlib.contextmanager
def _warnings_name(name: str) -> Iterator[None]:
    """While a command runs, a warning it prints names the command: at the first frame
    outside headrace (``warn_user``'s) a command has only Python's own, and ``headrace
    bench`` printed ``<frozen runpy>:88: RuntimeWarning: Loader.close(): ...``."""
    before = warnings.formatwarning

    def formatwarning(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        line: str | None = None,
    ) -> str:
        del filename, lineno, line  # the frame a command's warning was found at: Python's
        return f"headrace {name}: {category.__name__}: {message}\n"

    warnings.formatwarning = formatwarning
    try:
        yield
    finally:
        warnings.formatwarning = before


@contextlib.contextmanager
def _unwind_on_sigterm(name: str) -> Iterator[None]:
    """While a command runs, SIGTERM (a scheduler's stop, ``kill``) raises
    :class:`_Terminated` in the main thread, so that it unwinds as on Ctrl-C: ``gen``
    removes the file it was writing (``NAME.part`` was left beside the dataset), ``bench``
    stops its measurement process (which went on reading for the rest of its trial), its
    S3 server and its slowfs mounts. Its default action ends the process on the spot.

    Not for ``emulate``: its servers stop on SIGTERM themselves, and libfuse installs its
    own handler (which unmounts) only where SIGTERM's is still the default one.
    """
    if name == "emulate" or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: FrameType | None) -> None:
        # Once: a second SIGTERM while unwinding must not cut the clean-up short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise _Terminated(128 + signum)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="headrace", description="Deterministic, storage-aware data loading."
    )
    parser.add_argument(  # for bug reports: which headrace, on which Python
        "--version",
        action="version",
        version=f"headrace {__version__} (Python {platform.python_version()})",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not args_list or args_list[0] not in COMMANDS:
        parser.parse_args(args_list)  # prints help or the error and exits
        parser.print_help()
        return 2
    name = args_list[0]
    module = importlib.import_module(COMMANDS[name][0])
    args = command_parser(name).parse_args(args_list[1:])
    try:
        with _unwind_on_sigterm(name), _warnings_name(name):
            return int(module.run(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except _Terminated as exc:
        print("terminated (SIGTERM)", file=sys.stderr)
        return int(exc.code or 143)
    except BrokenPipeError:
        # The reader went away (`headrace bench --list | head`): stop quietly, as `cat`
        # does. stdout goes to /dev/null so the interpreter's final flush cannot fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141  # 128 + SIGPIPE, what a shell reports for a killed writer
    except ModuleNotFoundError as exc:
        # An optional extra the command needs (obstore for an s3:// URL, pyarrow...): its
        # message names the pip install; a traceback would bury it. Any other is a bug.
        if "pip install 'headrace[" not in str(exc):
            raise
        print(f"headrace {name}: {exc}", file=sys.stderr)
        return 2
    except errors.HeadraceError as exc:
        # A sub-command's own refusal (bad option, missing file): the message says what
        # was given and the fix; a traceback would bury it. One line: a message quoting
        # a parser's (PyYAML's spans lines) is joined, so scripts read it as one.
        # Notes (the other files that failed, the step being read) follow, "; " apart.
        text = "; ".join([_said(exc), *getattr(exc, "__notes__", [])])
        print(f"headrace {name}: {_LINE_BREAKS.sub(' ', text)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
