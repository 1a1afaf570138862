"""The check every command makes of an output path (``--json``, ``--plot``) before it
starts: a report that cannot be written is refused up front, not after the run."""

from __future__ import annotations

import os

from headrace.errors import ConfigError

__all__ = ["check_output_path", "refuse_output_over_input"]


def check_output_path(flag: str, path: str) -> None:
    """Refuse an unwritable output path before the run, not after minutes of it (and an
    empty one: ``--json "$OUT"``, OUT unset, read as no flag or as the folder '.')."""
    if path == "":
        raise ConfigError(
            f"{flag} '' is empty (an unset shell variable?): give the output's path, or "
            f"leave {flag} out"
        )
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
    exists = os.path.exists(path)
    if exists and not os.access(path, os.W_OK):
        raise ConfigError(
            f"{flag} {path!r} is not writable (an existing read-only or immutable file); "
            "remove it or choose another path"
        )
    # access() answers from the mode bits, and root passes them all: /proc, /sys, a FUSE
    # mount without allow_root or an NFS export that squashes root refuse the create
    # itself, and `bench --json /proc/r.json` ran its whole length as root, then failed.
    # So open it as the report will be: an existing file for append (nothing written,
    # its contents kept), a new one created and removed again.
    if exists and not os.path.isfile(path):
        return  # /dev/stdout, a FIFO (opening one blocks until its reader comes): as given
    try:
        fd = os.open(path, os.O_WRONLY | (os.O_APPEND if exists else os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return  # created meanwhile by someone else: theirs to keep
    except OSError as exc:
        raise ConfigError(
            f"{flag} {path!r} cannot be written ({exc.strerror}); choose a writable path, "
            f"e.g. {flag} /tmp/{os.path.basename(path) or 'r.json'}"
        ) from None
    os.close(fd)
    if not exists:
        os.unlink(path)


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
