"""Message text shared by layers that cannot import each other (formats, bench)."""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from headrace.errors import ConfigError

__all__ = [
    "RECOPY",
    "byte_size",
    "count_fix",
    "first_failed",
    "framework_missing",
    "masked_field",
    "object_field",
    "refuse_a_set",
    "said",
    "some_of",
    "unknown_keys",
    "write_json",
    "write_whole",
]


#: What a refusal of a damaged file says to do, after naming it and what is wrong.
RECOPY = "copy the file again (a partial copy or download?) or leave it out"


def said(exc: BaseException) -> str:
    """``exc``'s message as a command prints it: an error made as ``OSError(errno,
    message)`` (headrace's storage errors) reads "[Errno 2] x.npy: no such file" as
    ``str()``; the number is for code (``exc.errno``), the message for the user."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename is None:
        return exc.strerror
    return str(exc)


def refuse_a_set(name: str, value: object, reads: str) -> None:
    """Refuse a ``set`` given for the list ``name``: the ``reads`` would be read in its
    order, which string hashing changes from one process to the next, and the state's
    fingerprint with it (a restart refused its own state at random, until 2026-12-03)."""
    if isinstance(value, set | frozenset):
        raise ConfigError(
            f"{name} must be a list, e.g. {name}={sorted(value, key=str)!r}, not a set: a "
            f"set's order changes from one process to the next, and with it the order of "
            f"the {reads} read and the state's fingerprint (a restart would refuse its state)"
        )


def some_of(names: list[str], most: int = 8) -> str:
    """The first ``most`` of ``names``, joined: ``a, b and 3 more``."""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def first_failed(failed: Sequence[tuple[str, BaseException]], what: str) -> BaseException:
    """The first of ``failed`` (each file's name and error, in file order), with a note
    naming the others (``what``: the note's words, as "of the table failed to open too")
    and those errors, as its ``others_failed`` (``headrace check --json`` lists each, as it
    does a FileSource's failed headers: the note names 8)."""
    first, others = failed[0][1], [str(f) for f, _ in failed[1:]]
    # Errors alone: a Ctrl-C in another file's open is not a problem of that file.
    setattr(  # noqa: B010 (undeclared)
        first, "others_failed", [e for _, e in failed[1:] if isinstance(e, Exception)]
    )
    if others:
        # Named, not counted: headrace check stops here, and a count sent the user to
        # open the files one at a time to find which.
        files_ = "file" if len(others) == 1 else "files"
        first.add_note(f"{len(others)} other {files_} {what}: {some_of(others)}")
    return first


def count_fix(says: str) -> str:
    """What to do about a file whose leading axis is not the samples ``says`` gives it
    (``"samples_per_file=N"``, or ``"its count"``: read from its header, or given)."""
    if says.startswith("samples_per_file="):
        return (
            "; where files hold different numbers of samples, give "
            "samples_per_file='header' (each file's count read from its header)"
        )
    return "; the file changed since it was counted (or its count is wrong): open the source again"


def byte_size(n: float) -> str:
    """Bytes in the unit that reads (kB = 10^3 B): 516 B, 300.0 kB, 1.5 MB, 1.07 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:,.{2 if unit == 'GB' else 1}f} {unit}"
    return f"{n:,.0f} B"


def framework_missing(module: str, package: str) -> ModuleNotFoundError:
    """The error for an adapter whose framework is not installed: still a
    ``ModuleNotFoundError`` named after the package (what ``except ImportError`` and
    ``pytest.importorskip`` look at), saying which extra installs it."""
    return ModuleNotFoundError(
        f"{module} needs {package}, which is not installed: pip install 'headrace[{package}]' "
        f"(or {package} built for your accelerator, from {package}'s install guide)",
        name=package,
    )


def masked_field(name: str, keeps: str) -> str:
    """The refusal of a masked array field (``np.ma.MaskedArray``, a transform's) where the
    batch goes on without its mask, which would make its masked items real ones:
    ``keeps`` says what goes on ("a tensor holds its data")."""
    return (
        f"field {name!r} is a masked array: {keeps}, not its mask; pass them as two fields "
        f"(np.ma.getdata({name}) and np.ma.getmaskarray({name})), or fill the masked "
        f"items ({name}.filled(value))"
    )


def object_field(name: str, values: Iterable[object]) -> str:
    """What a batch's ``object`` field holds, for the adapters' refusals: samples of
    several shapes (arrays), or Python objects that are no array at all (an HDF5
    variable-length string is a ``bytes``; a transform's list of numbers, such as
    COCO's polygons, a ``list``), the first of them shown, with where it comes from;
    or samples of one shape but several dtypes (files written by different code)."""
    values = list(values)  # a.flat: iterated twice here
    for i, v in enumerate(values):
        if not hasattr(v, "shape"):
            text = repr(v)
            shown = text if len(text) <= 40 else text[:37] + "..."
            if isinstance(v, str | bytes):
                why = "; HDF5 variable-length strings come so"
            elif isinstance(v, list | tuple):
                why = "; make each sample an array in the transform: np.asarray(sample, dtype=...)"
            else:
                why = ""
            return (
                f"field {name!r} holds Python objects, not arrays of numbers (sample {i} is "
                f"a {type(v).__name__}: {shown}{why})"
            )
    shapes = {getattr(v, "shape", None) for v in values}
    if len(shapes) == 1:  # files that wrote one field with different dtypes
        dtypes = ", ".join(sorted({str(getattr(v, "dtype", "?")) for v in values}))
        return (
            f"field {name!r} holds samples of one shape {next(iter(shapes))} but different "
            f"dtypes ({dtypes}) (an object array; one dtype with a transform: a.astype(...))"
        )
    return f"field {name!r} holds samples of different shapes (an object array)"


def unknown_keys(
    where: str, unknown: Iterable[str], known: Iterable[str], who: str, what: str = "key"
) -> str:
    """The message for names nobody takes (a workload's keys, a source's options):
    each with the closest known name, then the known ones.

    ``jpeg.toml [reader]: unknown key 'in_flght' (did you mean 'in_flight'?); the
    files kind reads: ...``
    """
    names = sorted(set(known))
    parts = []
    for key in unknown:
        close = difflib.get_close_matches(key, names, n=1)
        parts.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    noun = what if len(parts) == 1 else f"{what}s"
    return f"{where}: unknown {noun} {', '.join(parts)}; {who}: {', '.join(names) or 'nothing'}"


def write_json(path: str, data: Any) -> None:
    """A command's ``--json PATH`` report, indented (``-``: to stdout, where the command
    then prints its table to stderr); a path that cannot be written is a ``ConfigError``
    naming it."""
    if path == "-":
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
        sys.stdout.flush()
        return
    try:
        write_whole(path, json.dumps(data, indent=2) + "\n")
    except OSError as exc:
        raise ConfigError(f"--json {path}: cannot write it ({exc.strerror})") from None


def write_whole(path: str, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: into a temporary file beside it,
    then renamed over it. Written in place, a full disk left ``path`` cut short (a report
    a later ``bench compare`` read as the run's); now ``path`` is the old file or the new
    one, and the temporary file is removed. A link's file is replaced, not the link; a
    path that is no regular file (``/dev/stdout``, a FIFO) is written as it is. An
    ``OSError`` names ``path``, not the temporary file."""
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        regular = True  # none yet (or none reachable: the open below says why)
    if not regular:
        with open(path, "w") as fh:
            fh.write(text)
        return
    target = os.path.realpath(path)
    tmp = f"{target}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())  # a write-back error (NFS, a full disk) is raised here
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        if isinstance(exc, OSError) and exc.filename in (None, tmp):
            exc.filename = path
        raise
