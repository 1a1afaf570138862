"""``headrace check DATA``: read a dataset once before a run and list every bad sample.

    headrace check photos/ --format jpeg
    headrace check 's3://bucket/train/*.npz' --format npz --samples-per-file header \\
        --store-option endpoint=http://127.0.0.1:9000
    headrace check val.bin --format tokens --dtype uint16 --context 1024 --vocab-size 50257
    headrace check shards/*.bin --format tokens --dtype uint16   # several files: one source
    headrace check tokenized/ --format table --columns input_ids --width 2048 --vocab-size 50257
    headrace check 's3://bucket/train/' --format jpeg --shard 3/8    # machine 3 of 8
    headrace check 's3://bucket/mds/' --format mds --split train --columns image,label

A file dataset is read as :class:`~headrace.formats.FileSource` reads it, a token
file as :class:`~headrace.formats.TokenSource` does, a table (Parquet, Arrow,
``save_to_disk``) as :class:`~headrace.formats.TableSource` does, MDS shards as
:class:`~headrace.formats.MDSSource` does, through
:func:`~headrace.pipeline.check`. Exit status 0: every sample read; 1: problems
(each printed: source, sample, error, message); 2: nothing could be checked (a
bad argument, a listing that failed).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shlex
import sys
from typing import Any

from headrace._messages import said, write_json
from headrace._output_path import check_output_path, refuse_output_over_input
from headrace._store_option import add_store_option, store_options
from headrace.errors import ConfigError, HeadraceError

__all__ = ["configure", "run"]

# FileSource's names and its aliases (jpg, h5): what users type.
_FILE_FORMATS = (
    "jpeg",
    "jpg",
    "png",
    "webp",
    "image",
    "npy",
    "npz",
    "hdf5",
    "h5",
    "tar",
    "tfrecord",
    "array_record",
    "raw",
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "data",
        nargs="+",
        help="a file, directory, glob or URL (s3://, gs://, az://, ...), or several files "
        "(a shell glob) read as one dataset; with --format tokens a directory or glob "
        "means its .bin files",
    )
    p.add_argument(
        "--format",
        choices=(*_FILE_FORMATS, "tokens", "table", "mds"),
        help="required: a file format (FileSource); 'tokens': raw/nanoGPT/Megatron token files; "
        "'table': Parquet, Arrow IPC or a datasets save_to_disk folder (TableSource); "
        "'mds': MosaicML Streaming's MDS shards (MDSSource)",
    )
    p.add_argument("--columns", metavar="A,B", help="columns to read (table, mds; default: all)")
    p.add_argument(
        "--split",
        metavar="NAME",
        help="the split's subfolder, as Streaming's split= (mds: DATA/NAME/index.json)",
    )
    p.add_argument(
        "--width",
        action="append",
        default=[],
        metavar="N|NAME=N|NAME=LxI",
        help="pad (or, past it, refuse) every list column to N items, or column NAME's; "
        "NAME=LxI: a column of rows of lists (--shape NAME=NxN) to L lists of I items "
        "(table); repeat for more",
    )
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D1xD2",
        help="read a column of lists of lists as this shape, e.g. input_features=80x3000, "
        "or boxes=Nx4 for rows of as many items as each has, or words=NxN for rows of "
        "lists of any length (with --width words=LxI) (table; each row checked); "
        "repeat for more",
    )
    p.add_argument(
        "--truncate",
        action="store_true",
        help="cut lists longer than --width, as a run with truncate=True does (table)",
    )
    p.add_argument(
        "--samples-per-file",
        metavar="N|header",
        help="samples in each file (NPY, NPZ, HDF5, tar), or 'header' to read each count "
        "(default: 1; tar and TFRecord: header, unless counts are given)",
    )
    p.add_argument(
        "--datasets",
        metavar="A,B",
        help="HDF5 datasets, NPZ members, tar fields or TFRecord features to read",
    )
    p.add_argument(
        "--dtype",
        help="token dtype: uint16, uint32 or int32 (tokens; default: a Megatron .idx's, "
        "the FILE.json sidecar's, or uint16 for nanoGPT's train.bin and val.bin)",
    )
    p.add_argument("--context", type=int, help="tokens a window (tokens; default 1024)")
    p.add_argument(
        "--vocab-size", type=int, help="refuse token ids >= this (tokens; table: list columns)"
    )
    add_store_option(p)
    p.add_argument(
        "--labels",
        metavar="folders|CSV",
        help="count the samples of each class (file formats): 'folders', a file's class is "
        "its folder, as torchvision's ImageFolder has it; or a CSV file of 'file,class' "
        "rows (the files' names under the folder given, or as listed): files without a "
        "class are refused",
    )
    p.add_argument("--batch-size", type=int, default=64, help="samples a read (default 64)")
    p.add_argument(
        "--most",
        type=int,
        default=100,
        help="stop after this many problems; the samples of one message (a truncated or "
        "deleted file's, an object's 403) are one problem, each still listed in --json",
    )
    p.add_argument(
        "--shard",
        default="0/1",
        metavar="I/K",
        help="check steps I, I+K, ... only: K machines check together, each sample once "
        "(a dataset of fewer than K steps is read in smaller ones; default 0/1: all)",
    )
    p.add_argument(
        "--json",
        metavar="PATH",
        help="also write the report as JSON (- for stdout; the summary then goes to stderr)",
    )


def _source(args: argparse.Namespace) -> Any:
    from headrace.formats import FileSource, TokenSource

    options = store_options(args.store_option)
    table_flags = [
        flag
        for flag, value in (
            ("--columns", args.columns),
            ("--width", args.width or None),
            ("--truncate", args.truncate or None),
            ("--shape", args.shape or None),
        )
        if value is not None
    ]
    if args.labels and args.format in ("table", "tokens", "mds"):
        raise ConfigError("--labels is for file formats (a class folder a file)")
    if args.split is not None and args.format != "mds":
        raise ConfigError("--split is for --format mds (Streaming's split folders)")
    if args.context is not None and args.format != "tokens":
        # (it was dropped: a file dataset's, a table's or MDS's samples are no windows)
        raise ConfigError(
            f"--context is for --format tokens (the tokens of a window); --format "
            f"{args.format}'s samples are its own: drop it"
        )
    if args.format == "table":
        return _table(args, options)
    if args.format == "mds":
        return _mds(args, options, table_flags)
    if table_flags:
        raise ConfigError(f"{table_flags[0]} is for --format table (a table's columns)")
    if args.format == "tokens":
        for flag, value in (
            ("--samples-per-file", args.samples_per_file),
            ("--datasets", args.datasets),
        ):
            if value is not None:  # (it was dropped)
                raise ConfigError(
                    f"{flag} is for file formats; a token file's samples are its windows of "
                    "--context tokens"
                )
        extra: dict[str, Any] = {"dtype": args.dtype} if args.dtype else {}
        if args.vocab_size is not None:
            extra["vocab_size"] = args.vocab_size
        # Folders and globs (a quoted one; the shell expands the others) are TokenSource's.
        return TokenSource(
            args.data[0] if len(args.data) == 1 else args.data,
            context=1024 if args.context is None else args.context,
            store_options=options,
            **extra,
        )
    given = [
        flag
        for flag, value in (("--dtype", args.dtype), ("--vocab-size", args.vocab_size))
        if value is not None
    ]
    if given:
        raise ConfigError(f"{given[0]} is for --format tokens; a file dataset has no token ids")
    spf: Any = args.samples_per_file
    if spf is not None and spf != "header":
        try:
            spf = int(spf)
        except ValueError:
            raise ConfigError(
                f"--samples-per-file must be an integer or 'header' (got {spf!r})"
            ) from None
    # "x, y": the space is no part of a name (the dataset " y" was not found)
    names = [d.strip() for d in (args.datasets or "").split(",") if d.strip()]
    datasets = tuple(names) if names else None
    # One local file (a shell glob that matched one) is a dataset of that file: FileSource
    # takes a folder for a string, and the command refused it with the Python API's fix
    # ("pass ['x.npy'] (a list) to read this file alone").
    one = len(args.data) == 1 and not os.path.isfile(args.data[0])
    settings: dict[str, Any] = {
        "store_options": options,
        "format": args.format,
        "samples_per_file": spf,
        "datasets": datasets,
        "labels": _labels(args.labels),
    }
    try:
        return FileSource(args.data[0] if one else args.data, **settings)
    except HeadraceError:
        # A URL of one object (s3://b/x/0.jpg, file:///x/0.jpg) lists nothing as a prefix,
        # and FileSource told the command line to "pass [...] (a list)", which it cannot
        # give. Tried as that list on this error path only (a prefix costs nothing more);
        # a name that is no object either keeps the listing's error, which says so.
        if not (one and "://" in args.data[0]):
            raise
        try:
            return FileSource([args.data[0]], **settings)
        except HeadraceError:
            pass
        raise


def _labels(given: str | None) -> str | dict[str, str] | None:
    """``--labels``: ``"folders"``, or the mapping a CSV file's ``file,class`` rows give
    (further columns ignored; a header row is a file no source lists, never looked up)."""
    if given is None or given == "folders":
        return given
    try:
        with open(given, newline="", encoding="utf-8-sig") as f:  # (a BOM, as Excel writes)
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        said = e.strerror if isinstance(e, OSError) and e.strerror else f"not a UTF-8 CSV ({e})"
        raise ConfigError(
            f"--labels {given}: {said} (give 'folders' or a CSV file of 'file,class' rows)"
        ) from None
    short = next((n for n, row in enumerate(rows, 1) if 0 < len(row) < 2), None)
    if short is not None:
        raise ConfigError(
            f"--labels {given}: line {short} has no class ({rows[short - 1]!r}): each row is "
            "'file,class'"
        )
    out: dict[str, str] = {}
    for n, row in enumerate(rows, 1):
        if row and out.setdefault(row[0], row[1]) != row[1]:
            raise ConfigError(
                f"--labels {given}: line {n} gives {row[0]!r} the class {row[1]!r}, an "
                f"earlier line {out[row[0]]!r}: one class a file"
            )
    return out


def _mds(args: argparse.Namespace, options: dict[str, Any], table_flags: list[str]) -> Any:
    from headrace.formats import MDSSource

    others = [f for f in table_flags if f != "--columns"] + [
        flag
        for flag, value in (
            ("--samples-per-file", args.samples_per_file),
            ("--datasets", args.datasets),
            ("--dtype", args.dtype),
            ("--vocab-size", args.vocab_size),
        )
        if value is not None
    ]
    if others:
        raise ConfigError(f"{others[0]} is not for --format mds (MDS columns carry their types)")
    if len(args.data) != 1:
        raise ConfigError("--format mds reads one dataset: give its folder or prefix once")
    columns = [c.strip() for c in (args.columns or "").split(",") if c.strip()] or None
    return MDSSource(args.data[0], columns=columns, split=args.split, store_options=options)


def _table(args: argparse.Namespace, options: dict[str, Any]) -> Any:
    from headrace.formats import TableSource

    if args.dtype is not None:
        raise ConfigError("--dtype is for --format tokens; a table's columns carry their types")
    for flag, value in (
        ("--samples-per-file", args.samples_per_file not in (None, "1")),
        ("--datasets", args.datasets),
    ):
        if value:
            raise ConfigError(f"{flag} is for file formats; a table's rows are its samples")
    columns = [c.strip() for c in (args.columns or "").split(",") if c.strip()] or None
    data = args.data[0] if len(args.data) == 1 else args.data
    width, widths = _widths(args.width)
    return TableSource(
        data,
        columns=columns,
        width=width,
        widths=widths or None,
        truncate=args.truncate,
        vocab_size=args.vocab_size,
        store_options=options,
        shapes=_shapes(args.shape) or None,
    )


def _widths(given: list[str]) -> tuple[int | None, dict[str, int | tuple[int, int]]]:
    """``--width`` flags as ``width=`` (``N``: every list column's, the last given) and
    ``widths=`` (``NAME=N``; ``NAME=LxI``: ``(lists, items)`` of a column of rows of lists,
    ``--shape NAME=NxN``)."""
    width: int | None = None
    widths: dict[str, int | tuple[int, int]] = {}
    for item in given:
        name, eq, value = item.rpartition("=")
        parts = value.lower().split("x")
        counts = [int(d) for d in parts if d.isdigit() and int(d) >= 1]
        if len(counts) != len(parts) or len(parts) > 2 or (eq and not name.strip()):
            raise ConfigError(
                f"--width {item!r}: give it as N (every list column), NAME=N (one column) "
                "or NAME=LxI (a column of rows of lists, --shape NAME=NxN: L lists of I "
                "items), e.g. --width 2048 or --width words=8x128"
            )
        if not eq and len(counts) == 1:
            width = counts[0]
        elif eq:
            widths[name.strip()] = counts[0] if len(counts) == 1 else (counts[0], counts[1])
        else:
            raise ConfigError(
                f"--width {item!r}: a pair of widths is one column's: give it as NAME=LxI, "
                "e.g. --width words=8x128"
            )
    return width, widths


def _shapes(given: list[str]) -> dict[str, tuple[int | None, ...]]:
    """``--shape NAME=D1xD2`` flags as ``shapes=`` (``NAME=Nx4``: a first dimension
    ``None``, rows of as many items as each has; ``NAME=NxN``: ``(None, None)``, rows of
    lists of any length, with ``--width NAME=LxI``)."""
    out = {}
    for item in given:
        name, eq, dims = item.partition("=")
        try:
            parts = dims.lower().split("x")
            if parts == ["n", "n"]:
                shape: tuple[int | None, ...] = (None, None)
            else:
                shape = tuple(None if d == "n" and not k else int(d) for k, d in enumerate(parts))
        except ValueError:
            shape = ()
        if not eq or not name.strip() or not shape:
            raise ConfigError(
                f"--shape {item!r}: give it as NAME=D1xD2..., e.g. --shape input_features=80x3000 "
                "(or NAME=Nx4: rows of as many items of 4 as each has)"
            )
        out[name.strip()] = shape
    return out


# A file's first bytes and the --format they ask for (HDF5's, tar's "ustar" at 257).
_MAGIC = (
    (0, b"PAR1", "table"),
    (0, b"ARROW1", "table"),
    (0, b"\x93NUMPY", "npy"),
    (0, b"PK\x03\x04", "npz"),
    (0, b"\x89PNG\r\n\x1a\n", "png"),
    (0, b"\xff\xd8\xff", "jpeg"),
    (0, b"\x89HDF\r\n\x1a\n", "hdf5"),
    (0, b"MMIDIDX", "tokens"),
    (257, b"ustar", "tar"),
)


def _guess_format(data: str) -> str | None:
    """The ``--format`` that ``data``'s name (a local file's first bytes where its name
    says nothing) asks for, or None: said to a user who left ``--format`` out, never used
    in its place (a .bin is raw bytes to one user and token ids to another)."""
    from glob import glob

    from headrace.formats._files import format_of

    if "://" not in data and not os.path.exists(data):
        data = next(iter(sorted(glob(data))), data)
    name = os.path.basename(data.rstrip("/"))
    ext = os.path.splitext(name)[1].lower()
    if name == "index.json":
        return "mds"
    if ext in (".parquet", ".arrow", ".feather"):
        return "table"
    if ext in (".bin", ".idx"):
        stem = data[: -len(ext)]
        return "tokens" if os.path.isfile(stem + ".idx") and os.path.isfile(stem + ".bin") else None
    fmt = format_of(name)
    if fmt is not None:
        return fmt.name
    if os.path.isdir(data):
        names = os.listdir(data)
        if "index.json" in names:
            return "mds"
        if "dataset_info.json" in names or "state.json" in names:
            return "table"  # a datasets save_to_disk folder
        # (The first 64 names: a class folder's files, a folder of 1,000 classes.)
        some = sorted(names)[:64]
        guesses = [g for g in (_guess_format(os.path.join(data, n)) for n in some) if g]
        return max(set(guesses), key=guesses.count) if guesses else None
    try:
        with open(data, "rb") as f:
            head = f.read(512)
    except OSError:
        return None
    return next((fmt for at, magic, fmt in _MAGIC if head[at : at + len(magic)] == magic), None)


def _refuse_no_format(data: list[str]) -> None:
    """``--format`` left out: the one ``data`` looks like, as a command to type, else the
    choices (argparse said only "the following arguments are required: --format")."""
    for item in data:
        fmt = _guess_format(item)
        if fmt is not None:
            raise ConfigError(
                f"--format is required; {item} looks like --format {fmt}: "
                f"{shlex.join(['headrace', 'check', *data, '--format', fmt])}"
            )
    raise ConfigError(
        f"--format is required, and the name and first bytes of {data[0]} do not say which: "
        f"one of {', '.join((*_FILE_FORMATS, 'tokens', 'table', 'mds'))} (tokens: raw, "
        "nanoGPT or Megatron token files; table: Parquet, Arrow, save_to_disk; mds: "
        "MosaicML Streaming shards)"
    )


def run(args: argparse.Namespace) -> int:
    from headrace.pipeline import check

    if args.format is None:
        _refuse_no_format(args.data)
    i, slash, k = args.shard.partition("/")
    if not (slash and i.isdigit() and k.isdigit()):
        raise ConfigError(f"--shard {args.shard!r}: give it as I/K, e.g. 0/4 (the first of 4)")
    _check_ranges(args, int(i), int(k))
    for data in args.data:
        _refuse_a_state(data)
    if args.json is not None and args.json != "-":
        # Before the check, which can take hours: it wrote nothing, and exited 2, after.
        check_output_path("--json", args.json)
        from headrace.formats import file_format

        exts: tuple[str, ...] = (
            ()
            if args.format == "tokens"
            else (".mds", ".json")
            if args.format == "mds"
            else (".parquet", ".arrow")
            if args.format == "table"
            else file_format(args.format).extensions
        )
        for data in args.data:
            refuse_output_over_input("--json", args.json, data, exts)
    try:
        source = _source(args)
    except HeadraceError as exc:
        _name_the_flag(exc)
        _tell_stopped(args, exc)
        raise
    # No read is larger than the dataset: a --batch-size of 10**11 on 3 samples allocated
    # 745 GiB of sample numbers (a MemoryError traceback, exit 1), one of 2**70 was refused
    # about "steps [0, 0]". Clamped, it checks every sample in one read, as it meant.
    n = getattr(source, "samples_per_epoch", None)
    batch_size = args.batch_size
    if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
        batch_size = min(batch_size, n)
    try:
        report = check(
            source,
            batch_size=batch_size,
            most=args.most,
            shard=(int(i), int(k)),
            progress=_progress(),
        )
        # The whole table's, whatever --shard checked (as a folder's classes are).
        columns = _column_classes(source) if args.format == "table" else {}
    except HeadraceError as exc:  # one that stops the check (a setting), not a sample's
        _name_the_flag(exc)
        _tell_stopped(args, exc)
        raise
    except (KeyboardInterrupt, SystemExit) as exc:
        found = getattr(exc, "report", None)
        if found is not None:  # what was found before Ctrl-C or SIGTERM, then its exit
            sys.stderr.write("\n")
            _tell(args, source, found)
        raise
    finally:
        source.close()
        sys.stderr.write("\n")
    _tell(args, source, report, columns)
    return 0 if report.ok else 1


def _refuse_a_state(data: str) -> None:
    """A saved loader state (``state_dict()`` as JSON) given as data is told as one: read
    as tokens it was refused as text to tokenize, advice for a dataset, not a checkpoint.
    Only a small local file whose JSON holds a state's keys is opened."""
    try:
        # A regular file only: opening a FIFO would wait for a writer (TokenSource refuses
        # one by name, unopened).
        if not os.path.isfile(data) or os.path.getsize(data) > 1 << 20:
            return
        with open(data, "rb") as f:
            if f.read(1) != b"{":
                return
            f.seek(0)
            state = json.load(f)
    except (OSError, ValueError):
        return
    if not (
        isinstance(state, dict) and {"seed", "step", "batch_size", "fingerprint"} <= set(state)
    ):
        return
    given = state.get("parts")
    parts: dict[str, Any] = given if isinstance(given, dict) else {}
    sources = [k.removeprefix("sources.") for k in parts if k.startswith("sources.")]
    saved_on = f"; sources {', '.join(repr(n) for n in sources)}" if sources else ""
    try:
        files = json.loads(parts.get("files:named", "{}"))
        named = [str(f[0]) for f in files.get("files", [])]
        shown = ", ".join(named[:8]) + (f" and {len(named) - 8} more" if len(named) > 8 else "")
        saved_on += f"; saved on {files['count']:,} files of {files['bytes']:,} bytes" + (
            f": {shown}" if named else ""
        )
    except (TypeError, ValueError, KeyError, AttributeError):
        pass
    raise ConfigError(
        f"{data} is a headrace loader state (a state_dict() at step {state['step']}, global "
        f"batch {state['batch_size']}, plan version {state.get('version')}{saved_on}), not "
        "a dataset: headrace check reads a dataset's samples. Check the data the state "
        "was saved on (each source's files: headrace check FILES --format tokens ...); to "
        "see that the state resumes on it, load it into the run's loader: "
        "load_state_dict(state) refuses a state saved on other data before any read, naming "
        'what differs and the way on (docs/long-runs.md, "Restarts with changes")'
    )


def _check_ranges(args: argparse.Namespace, i: int, k: int) -> None:
    """The counts, by their flags: check() and the sources named them by their Python
    names (``check needs batch_size >= 1 and most >= 1 (got 0, 100)``, ``shard must be
    (i, k)``, ``samples_per_file must be >= 1``)."""
    if k < 1 or i >= k:
        raise ConfigError(
            f"--shard {args.shard}: I must be below K (machine I of K, counted from 0), "
            "e.g. --shard 0/4 ... --shard 3/4"
        )
    counts = [
        ("--batch-size", args.batch_size, "64"),
        ("--most", args.most, "100"),
        ("--context", args.context, "1024"),
        ("--vocab-size", args.vocab_size, "50257"),
    ]
    spf = args.samples_per_file or "1"
    if spf != "header" and spf.lstrip("-").isdigit():
        counts.append(("--samples-per-file", int(spf), "8"))
    for flag, value, example in counts:
        if value is not None and value < 1:
            raise ConfigError(
                f"{flag} {value}: expected a whole number >= 1, e.g. {flag} {example}"
            )


# A source's refusal names its Python argument; the command line has a flag for it.
_FLAGS = (
    # Quoted: the refusals that --dtype answers say "pass dtype='uint16'" (or dtype='{dt}');
    # others name a writer's or another argument's dtype= (a Megatron .idx's, x and y's).
    ("dtype='", "give it with --dtype uint16, --dtype uint32 or --dtype int32"),
    ("datasets=", "name them with --datasets, e.g. --datasets x,y"),
    # The message names Python's tail=True, which the command has no flag for.
    ("shorter than one sample of context", "give a smaller --context (the default is 1024)"),
    ("give it a fixed width", "give it with --width N (or leave the column out: --columns)"),
    ("pass truncate=True", "--truncate cuts them, as a run with truncate=True does"),
    ("with shapes={", "give it with --shape NAME=D1xD2 (e.g. --shape input_features=80x3000)"),
    # Rows of lists of any length (--shape NAME=NxN) with one --width N, or none.
    (
        "(lists, items)}",
        "give it with --width NAME=LxI (L lists of I items), e.g. --width words=8x128",
    ),
    ("vocab_size=", "vocab_size= is --vocab-size N (leave it out to check no token ids)"),
    # --format tokens given a Parquet or Arrow file: the refusal names Python's readers.
    (
        "A table's token lists read as",
        "check it as a table, --format table --columns input_ids --width N (one row a sample)",
    ),
)


def _name_the_flag(exc: HeadraceError) -> None:
    for word, fix in _FLAGS:
        if word in str(exc):
            exc.add_note(f"on the command line: {fix}")
    # check() stopped at a count every file read contradicted: the count they hold.
    got = re.search(r"give (?:samples_per_file=(\d+) or )?samples_per_file='header'", str(exc))
    if isinstance(exc, ConfigError) and got is not None:
        count = f"{got[1]} or header" if got[1] else "header"
        exc.add_note(f"on the command line: --samples-per-file {count}")


def _tell(
    args: argparse.Namespace,
    source: Any,
    report: Any,
    columns: dict[str, dict[str, int]] | None = None,
) -> None:
    """Print the report (and write its JSON with ``--json``); ``columns``: samples of
    each class of a table's class-label columns (:func:`_column_classes`)."""
    label = " ".join(args.data)
    out = sys.stderr if args.json == "-" else sys.stdout  # stdout is the JSON's
    print(f"{label}: {report}", file=out, flush=True)
    # Rows longer than --width are each a problem now, not a stop that named the flag.
    if any("pass truncate=True" in p.message for p in report.problems):
        print(f"{label}: on the command line: {dict(_FLAGS)['pass truncate=True']}", file=out)
    a_file = _a_file_a_sample(args, report.shapes)
    if a_file:
        print(f"{label}: {a_file}", file=out)
    n = getattr(source, "samples_per_epoch", None)
    whole = n if args.shard == "0/1" and isinstance(n, int) else None
    if not (report.complete or report.interrupted or (whole and report.samples >= whole)):
        # Stopped at --most: how much was left unread, and the flag (the report says
        # "most=100", the Python argument).
        of = f" of {whole:,}" if whole else ""
        left = f"the other {whole - report.samples:,}" if whole else "the rest"
        print(
            f"{label}: stopped at --most {args.most} problems after {report.samples:,}{of} "
            f"samples: {left} were not read; give a larger --most (e.g. --most "
            f"{10 * args.most}) to read on",
            file=out,
        )
    if args.shard != "0/1" and isinstance(n, int):
        # Which share this was: the K shards together read each sample once.
        k = int(args.shard.partition("/")[2])
        share = f"{label}: shard {args.shard}: {report.samples:,} of {n:,} samples"
        if n < k and not report.samples:
            share += f" (fewer samples than shards: shards 0/{k} to {n - 1}/{k} read them all)"
        print(share, file=out)
    files = args.format not in ("tokens", "table", "mds")
    skipped = source.files.skipped() if files else ""
    if skipped:
        print(f"{label}: {skipped}", file=out)
    classes = _class_samples(source) if files else None
    if classes is not None:
        print(f"{label}: {_per_class(classes)}", file=out)
    for column, counts in (columns or {}).items():
        print(f"{label}: column {column!r}: {_per_class(counts)}", file=out)
    if args.json:
        data = {
            "data": args.data[0] if len(args.data) == 1 else args.data,
            "shard": args.shard,
            "samples": report.samples,
            "complete": report.complete,
            "interrupted": report.interrupted,
            "seconds": report.seconds,
            "hidden_skipped": source.files.hidden if files else 0,
            "special_skipped": source.files.special if files else 0,
            "shapes": report.shapes,
            **({"classes": classes} if classes is not None else {}),
            **({"column_classes": columns} if columns else {}),
            "problems": [
                {"source": p.source, "sample": p.sample, "error": p.error, "message": p.message}
                for p in report.problems
            ],
        }
        write_json(args.json, data)


def _a_file_a_sample(args: argparse.Namespace, shapes: dict[str, dict[str, Any]]) -> str:
    """A line saying that each file was one sample, where ``--samples-per-file`` was not
    given for a format whose files often hold many (NPY, NPZ, HDF5) and each array read
    had 2 dimensions or more, the first longer than 1 (a 1-D array is taken for one
    sample's vector). HDF5 files of 256 samples each were checked as "3 samples read":
    every byte read, but the count and the numbers were the files' (a run with
    ``samples_per_file="header"`` reads 768), and nothing said so. Empty otherwise."""
    if args.format not in ("npy", "npz", "hdf5", "h5") or args.samples_per_file is not None:
        return ""
    firsts = {key: next(iter(seen)) for key, seen in shapes.items() if seen}
    for kind in firsts.values():
        dims = [d.strip() for d in kind.rpartition(" ")[0].strip("()").split(",")]
        if len([d for d in dims if d]) < 2 or int(dims[0]) < 2:
            return ""
    if not firsts:
        return ""
    named = ", ".join(f"{key!r} {kind}" for key, kind in list(firsts.items())[:3])
    more = f" and {len(firsts) - 3} more" if len(firsts) > 3 else ""
    return (
        f"each file was read as one sample (--samples-per-file 1, the default): "
        f"{named}{more} a sample; where a file's first axis is its samples, give "
        "--samples-per-file header to read and check each of them"
    )


def _tell_stopped(args: argparse.Namespace, exc: HeadraceError) -> None:
    """With ``--json``, write a report of the check ``exc`` stopped: damage found as the
    dataset was opened (a token file cut mid-token, a Parquet footer), a listing that
    failed. It exited 2 with the message on stderr alone, and the report a script reads
    was not written (or was a stale one). A command line refused (a ``ConfigError``)
    writes none: it is no finding about the data."""
    if not args.json or isinstance(exc, ConfigError):
        return
    source = {"tokens": "TokenSource", "table": "TableSource", "mds": "MDSSource"}
    # Every file that failed as the dataset was opened (the headers counted), each a
    # problem, up to --most: the message names 8 (and counts all), and the report listed
    # the first file alone.
    failed: list[BaseException] = [exc, *getattr(exc, "others_failed", [])][: args.most]
    data = {
        "data": args.data[0] if len(args.data) == 1 else args.data,
        "shard": args.shard,
        "samples": 0,
        "complete": False,
        "interrupted": False,
        "seconds": 0.0,
        "hidden_skipped": 0,
        "special_skipped": 0,
        "shapes": {},
        "problems": [
            {
                "source": source.get(args.format, "FileSource"),
                "sample": None,  # none read: the dataset, not a sample, failed
                "error": type(e).__name__,
                "message": "; ".join([said(e), *getattr(e, "__notes__", [])]),
            }
            for e in failed
        ],
    }
    try:
        write_json(args.json, data)
    except HeadraceError as lost:  # said after the error that stopped the check
        exc.add_note(str(lost))


def _class_samples(source: Any) -> dict[str, int] | None:
    """Samples of each class of a source with ``labels=`` (None without), by the files'
    counts: the whole dataset's, whatever ``--shard`` checked."""
    import numpy as np

    if source.classes is None:
        return None
    per = np.bincount(source.file_labels, weights=source.counts, minlength=len(source.classes))
    return {c: int(n) for c, n in zip(source.classes, per.tolist(), strict=True)}


def _per_class(counts: dict[str, int]) -> str:
    """``N classes, samples of each: a 10, b 12, ...`` (the first 20 named)."""
    n = len(counts) - (NO_LABEL in counts)
    shown = ", ".join(f"{c} {k:,}" for c, k in list(counts.items())[:20])
    more = f", ... ({len(counts) - 20:,} more)" if len(counts) > 20 else ""
    return f"{n:,} classes, samples of each: {shown}{more}"


#: Where a table's class tally counts a value outside its names: -1 is a split without
#: labels (a Hugging Face test split's ClassLabel column holds -1 in every row).
NO_LABEL = "(no label)"
_TALLY_ROWS = 65_536


def _column_classes(source: Any) -> dict[str, dict[str, int]]:
    """Samples of each class of each class-label column a table source reads
    (``source.classes``): rows, or a list column's items (``Sequence(ClassLabel)``),
    the whole table's, read a column at a time. Values outside the names are counted
    under :data:`NO_LABEL`, after the classes."""
    import numpy as np

    from headrace.formats import Ragged

    table = source.table
    out: dict[str, dict[str, int]] = {}
    for column, names in source.classes.items():
        counts = np.zeros(len(names), dtype=np.int64)
        outside = 0
        for lo in range(0, len(table), _TALLY_ROWS):
            rows = np.arange(lo, min(len(table), lo + _TALLY_ROWS))
            v = table.read_rows(rows, [column])[column]
            items = v.values[v.offsets[0] : v.offsets[-1]] if isinstance(v, Ragged) else v
            items = np.asarray(items, dtype=np.int64).ravel()
            inside = (items >= 0) & (items < len(names))
            counts += np.bincount(items[inside], minlength=len(names))
            outside += int(items.size - np.count_nonzero(inside))
        out[column] = dict(zip(names, counts.tolist(), strict=True))
        if outside:
            out[column][NO_LABEL] = outside
    return out


def _progress() -> Any:
    # On a terminal one line, rewritten at each percent; into a file or pipe (a job's
    # log) a line every 10%, not 100 carriage returns on one line (until 2026-12-03).
    tty = sys.stderr.isatty()
    every, last = (1, [-1]) if tty else (10, [-10])

    def show(done: int, total: int) -> None:
        pct = 100 * done // max(1, total)
        if pct >= last[0] + every or (pct == 100 and last[0] != 100):
            last[0] = pct
            line = f"checked {done:,} of {total:,} sample{'' if total == 1 else 's'} ({pct}%)"
            sys.stderr.write(f"\r{line}" if tty else f"{line}\n")
            sys.stderr.flush()

    return show
