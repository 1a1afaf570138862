"""The check every command makes of an output path (``--json``, ``--plot``) before it
starts: a report that cannot be written is refused up front, not after the run."""

from __future__ import annotations

import os

from headrace.errors import ConfigError

__all__ = ["check_output_path", "refuse_output_over_input"]


def check_output_path(flag: str, path: str) -> None:
    """Refuse an unwritable output path before the run, not after minutes of it."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        example = "r.png" if flag == "--plot" else "r.json"
        raise ConfigError(f"{flag} {path!r} is a folder; give a file path, e.g. {flag} {example}")
    if not os.path.isdir(folder):
        raise ConfigError(f"{flag} {path!r}: folder {folder!r} does not exist; create it first")
    if not os.access(folder, os.W_OK):
        raise ConfigError(
            f"{flag} {path!r}: folder {folder!r} is not writable; choose a writable path"
        )
    # The report is opened for writing in place: a read-only (or immutable) file in a
    # writable folder failed only after the run.
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise ConfigError(
            f"{flag} {path!r} is not writable (an existing read-only or immutable file); "
            "remove it or choose another path"
        )


def refuse_output_over_input(flag: str, path: str, data: str, extensions: tuple[str, ...]) -> None:
    """Refuse an output path that is a file the command reads: ``data`` itself, or a file
    ending in one of ``extensions`` under the folder ``data``. `headrace probe train.bin
    --json train.bin` wrote the report over the file it had probed; `headrace check photos
    --json photos/0001.jpg` over a photo."""
    if not os.path.isfile(path):
        return
    if os.path.isfile(data):
        reads = os.path.samefile(path, data)
    else:
        inside = os.path.realpath(path).startswith(os.path.join(os.path.realpath(data), ""))
        reads = os.path.isdir(data) and inside and path.lower().endswith(extensions)
    if reads:
        raise ConfigError(
            f"{flag} {path!r} is a file of the data read ({data!r}): the report would be "
            f"written over it; give another path, e.g. {flag} report.json"
        )
