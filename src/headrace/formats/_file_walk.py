"""A local folder's files as a dataset lists them: through symbolic links, less hidden files.

Listing is the only work a file dataset does up front; this is its local half (the
object-store half lists a prefix in one request, :mod:`headrace.formats._file_list`).
Hidden names (:func:`is_hidden`) are left out of a folder's or a prefix's listing alike,
and counted, so the listing can say what it skipped.
"""

from __future__ import annotations

import os
import re
import stat
from collections import Counter
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from headrace.errors import ConfigError, ObjectNotFoundError
from headrace.formats._pace import Pace, quick_then_pooled
from headrace.formats._packed_names import PackedNames, PackedSizes, PackedTags
from headrace.io import _in_flight as in_flight
from headrace.io import open_error

__all__ = [
    "Walked",
    "refuse_empty",
    "refuse_webdataset_urls",
    "refuse_glob_cycles",
    "kind_of",
    "refuse_special",
    "regular_stats",
    "stat_each",
    "stat_listed",
    "drop_hidden",
    "folder_suffixes",
    "is_hidden",
    "keep",
    "local_version",
    "none_found",
    "suffixes",
    "walk",
]


def refuse_empty(
    paths: Iterable[object],
    who: str,
    takes: str = "a folder, a glob pattern, an object URL or a list of files",
) -> None:
    """Refuse an empty path (``""``) among ``paths``: read as the current folder, it read
    whatever the folder a job starts in holds (``FileSource("")`` listed ``.``), and as
    a file it was "no such file" naming nothing. An unset variable gives one
    (``os.environ.get("DATA", "")``)."""
    for p in paths:
        if isinstance(p, (str, os.PathLike)) and os.fspath(p) == "":
            raise ConfigError(
                f"{who} got an empty path (''), which names no file (read as a folder, it "
                f"is the current one, {os.getcwd()}, whatever it holds); an unset "
                f"variable? Pass {takes}"
            )


#: webdataset's brace notation for shards (``train-{000000..000999}.tar``, ``{a,b}``).
_BRACES = re.compile(r"\{[^{}/]*(?:\.\.|,)[^{}/]*\}")


def refuse_webdataset_urls(paths: Iterable[object], who: str) -> None:
    """Refuse webdataset's names for shards that are no path or URL: a brace range
    (``train-{000000..000999}.tar``, which webdataset expands, as a shell does) and a
    ``pipe:`` URL (a command whose output webdataset reads). Each read as a path was "no
    such directory", naming nothing a WebDataset user could act on. A local path that
    exists as written (a folder named ``run-{0..1}``) is read as it is."""
    for p in paths:
        path = os.fspath(p) if isinstance(p, (str, os.PathLike)) else None
        if not isinstance(path, str) or not (path.startswith("pipe:") or "{" in path):
            continue  # no stat: a list of a million paths is not stat'ed twice
        if os.path.lexists(path):
            continue
        if path.startswith("pipe:"):
            words = path[len("pipe:") :].split()[1:]
            meant = next((w for w in words if "://" in w), None) or next(
                (w for w in reversed(words) if not w.startswith("-")), None
            )
            raise ConfigError(
                f"{path}: a webdataset pipe: URL (a command whose output webdataset reads); "
                f"{who} runs no command: give it the file or the object URL"
                + (
                    f" the command reads, {meant!r} (an object store's endpoint and "
                    "credentials in store_options=)"
                    if meant
                    else ""
                )
            )
        braces = _BRACES.search(path)
        if braces is not None:
            raise ConfigError(
                f"{path}: {braces.group()} is webdataset's brace notation, which {who} does "
                f"not expand: give the glob {_BRACES.sub('*', path)!r} (every shard it "
                f"matches) or a list of the shards (a subset: "
                f"list(braceexpand.braceexpand({path!r})), as webdataset expands it)"
            )


def local_version(st: os.stat_result) -> str:
    """A local file's version tag: device, inode and mtime (ns). A file renamed over
    (another inode) or written since (another mtime) has another tag."""
    return f"{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}"


#: TensorFlow Datasets names its shards ``mnist-train.tfrecord-00000-of-00004`` (and
#: ``.array_record-...``): the format's extension, then the shard's place.
_SHARD_PLACE = re.compile(r"-\d+-of-\d+$")


def keep(key: str, extensions: tuple[str, ...]) -> bool:
    """Whether ``key`` is a file of the format of ``extensions`` (any, where none), by its
    name: its extension, or a TFDS shard's (a folder that TFDS wrote was "no files
    ending in ['.tfrecord', '.tfrecords']", its shards counted as of other formats)."""
    name = key.lower()
    if not extensions or name.endswith(extensions):
        return True
    return name.rpartition("/")[2].find(".") > 0 and _SHARD_PLACE.sub("", name).endswith(extensions)


def is_hidden(key: str) -> bool:
    """Whether ``key`` (``/``-separated, below a dataset's folder or prefix) is hidden: a
    part of it starts with ``.``. macOS writes ``._x.jpg`` (AppleDouble: resource forks
    and Finder metadata, not a JPEG) beside every file it copies to a disk or share
    that lacks them, and ``.DS_Store``; Jupyter keeps ``.ipynb_checkpoints/``, editors
    ``.x.swp``, rsync ``.x.jpg.AbC123`` while it writes. ``glob`` leaves such names out
    unless a pattern asks for them; so does a folder's or prefix's listing (counted:
    :attr:`FileList.hidden`). A list of paths is read as given."""
    return key.startswith(".") or "/." in key


def drop_hidden(keys: list[Any], key: Callable[[Any], str]) -> tuple[list[Any], int, str | None]:
    """``keys`` less the hidden ones, how many those were, and the first of them."""
    kept = [k for k in keys if not is_hidden(key(k))]
    hidden = len(keys) - len(kept)
    first = next((key(k) for k in keys if is_hidden(key(k))), None) if hidden else None
    return kept, hidden, first


class Walked(NamedTuple):
    keys: PackedNames
    sizes: PackedSizes
    versions: PackedTags
    hidden: int  # hidden files with the extension, and hidden folders, left out
    hidden_example: str | None
    special: int = 0  # files with the extension that are not regular files, left out
    special_example: str | None = None
    other: int = 0  # files of another format that this walk was not for, left out
    other_example: str | None = None
    #: the folders (and links to folders) directly in the root, less hidden ones: a
    #: class folder that holds no file is a class all the same (``ImageFolder``'s)
    folders: tuple[str, ...] = ()


def kind_of(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def stat_listed(path: str) -> os.stat_result:
    """``os.stat(path)`` of a file listed (walked, globbed or named): a dangling symbolic
    link is refused as such, naming its target, any other error by :func:`open_error`.
    In flight while it runs (begin and end, not :class:`Waiting`: once a file listed)."""
    key = in_flight.begin(path, 0, -1, "stat")
    try:
        return os.stat(path)
    except OSError as exc:  # a dangling link named as such, with its target
        raise open_error(path, exc) from exc
    finally:
        in_flight.end(key)


#: Stats longer than this, four in a row (a network mount's, a cold disk's), send
#: the rest to threads; quicker ones (served from memory: ~5 us) stay in this thread,
#: where 64 threads contending for the GIL made a local listing 2.7x slower.
_SLOW_STAT_S = 50e-6


def stat_each(keys: Sequence[str], root: str = "") -> Iterator[os.stat_result]:
    """:func:`stat_listed` of each of ``keys`` (below ``root``, if given), in order.

    A network mount answers each stat in about a round trip (~1 ms): one after
    another, ImageNet's 1.28 million files took 21 minutes to list. So the stats go
    one after another while they are quick, many at a time once they are slow
    (:func:`quick_then_pooled`; ``os.stat`` releases the GIL).
    """
    # stat_listed looked up at each call: a test may stand in for it.
    return quick_then_pooled(
        lambda k: stat_listed(os.path.join(root, k) if root else k), keys, _SLOW_STAT_S
    )


def _walked_stat(path: str) -> os.stat_result | None:
    """:func:`stat_listed` of a file a folder's listing found; ``None`` where it is gone
    since (a clean-up at work in the folder): it was "no such file; did you mean" a
    file beside it, and no listing. A dangling link is still refused by name."""
    try:
        return stat_listed(path)
    except ObjectNotFoundError:
        if os.path.lexists(path):
            raise
        return None


def regular_stats(
    paths: Sequence[str], matched: Container[str] = (), root: str = ""
) -> Iterator[tuple[str, os.stat_result]]:
    """Each of ``paths`` (below ``root``, if given) that is a file, with its stat
    (:func:`stat_each`: many at a time once slow): a folder among ``matched`` (a glob
    pattern's matches: a set or dict, asked once a path) left out, any other path that
    is not a regular file refused by name (:func:`refuse_special`)."""
    for p, st in zip(paths, stat_each(paths, root), strict=True):
        if p in matched and stat.S_ISDIR(st.st_mode):
            continue  # a folder a pattern matches: not a sample
        refuse_special(os.path.join(root, p) if root else p, st)
        yield p, st


def refuse_special(path: str, st: os.stat_result) -> None:
    """Refuse a listed path that is not a regular file: reading a FIFO blocks until a
    writer comes (a read of a list holding one waited for ever), a socket or device
    has no size to check a read against."""
    if stat.S_ISREG(st.st_mode):
        return
    raise ConfigError(
        f"{path}: {kind_of(st.st_mode)}, not a regular file: a dataset's files are read by "
        "ranges and checked against their size, which a FIFO (named pipe), socket or device "
        "does not have (reading a FIFO waits for a writer for ever). Write its data to a "
        "file, or leave it out of the list"
    )


def walk(root: Path, extensions: tuple[str, ...], others: tuple[str, ...] = ()) -> Walked:
    """Sorted keys (``/``-separated, below ``root``) of the files ending in ``extensions``,
    their sizes and versions (from the stat that found each a regular file: one a file),
    less the hidden ones (:func:`is_hidden`: counted, and hidden folders not walked).

    Files ending in ``others`` (the extensions of the formats not read) are counted.

    Symbolic links are followed, to files and to folders: a class folder kept on
    another disk and linked in is part of the dataset (``rglob`` walked past
    linked folders, leaving their files out without a word). A dangling link
    with the extension is refused by name, as is a link to a folder above it
    (followed, it would list the same files without end).
    """
    top = os.fspath(root)
    with in_flight.Waiting("list", top):  # each file's stat is entered as well
        return _walk(root, top, extensions, others)


def _walk(root: Path, top: str, extensions: tuple[str, ...], others: tuple[str, ...]) -> Walked:
    # Three columns, not a tuple a file: packed one by one below, each freed once packed.
    found: list[str] = []  # the files to keep, if a stat finds each a regular file
    keys: list[str] = []
    sizes: list[int] = []
    versions: list[str] = []
    hidden: list[str] = []
    special: list[str] = []
    other: list[str] = []
    top_folders: tuple[str, ...] = ()

    def fail(exc: OSError) -> None:  # a directory without search permission: EACCES
        folder = str(exc.filename or root)
        err = open_error(folder, exc)
        if isinstance(exc, PermissionError) and folder != top:  # (lost+found: root's alone)
            err.add_note(
                f"a folder below {root} that this user may not list: make it readable, or "
                "give the files to read as a list or a glob pattern (dir/*/*.jpg) that "
                "leaves it out"
            )
        raise err from exc

    for folder, dirs, names, linked in _folders(top, fail):
        # Each folder is joined onto ``top`` as given: the rest is the folder's key.
        # (pathlib's relative_to and as_posix took ~45 us a file, most of the listing.)
        below = folder[len(top) :].lstrip(os.sep)
        prefix = below.replace(os.sep, "/") + "/" if below else ""
        if any(d.startswith(".") for d in dirs):  # not walked
            hidden += [prefix + d + "/" for d in dirs if d.startswith(".")]
            dirs[:] = [d for d in dirs if not d.startswith(".")]
        if not below:
            top_folders = tuple(sorted(dirs))
        links = [os.path.join(folder, d) for d in linked if not d.startswith(".")]
        if links:
            # Every folder the walk went through to get here, and every folder above each:
            # a link to one of them walks in a circle (through other links, maybe).
            above: set[str] = set()
            path = str(root)
            for part in ("", *Path(folder).relative_to(root).parts):
                path = os.path.join(path, part) if part else path
                up = os.path.realpath(path)
                while up not in above:
                    above.add(up)
                    up = os.path.dirname(up)
            for link in links:
                if os.path.realpath(link) in above:
                    raise ConfigError(
                        f"{link}: a symbolic link to {os.path.realpath(link)}, a folder above "
                        f"it in {root}: the dataset would hold its files over and over; remove "
                        "the link or list the files"
                    )
        for n in names:
            if not keep(n, extensions):
                if others and n.lower().endswith(others) and not n.startswith("."):
                    other.append(prefix + n)
                continue
            if n.startswith("."):
                hidden.append(prefix + n)
                continue
            found.append(prefix + n)
    # Stat after the walk, many at a time (as :func:`stat_each`), in the walk's order.
    stats = quick_then_pooled(lambda k: _walked_stat(os.path.join(top, k)), found, _SLOW_STAT_S)
    for key, st in zip(found, stats, strict=True):
        if st is None:
            continue  # deleted since the folder was listed: as if listed a moment later
        if stat.S_ISREG(st.st_mode):
            keys.append(key)
            sizes.append(st.st_size)
            versions.append(local_version(st))
        else:  # a FIFO, socket or device named like a sample: counted, as hidden files
            special.append(f"{key!r}: {kind_of(st.st_mode)}")
    del found
    # Sorted by key (a walk lists each once), each column packed and then let go: a
    # list of (key, size, version) tuples, sorted and packed whole, peaked 15 MB above
    # the lists it replaced for 200,000 files (64 vs 49 MB traced). The last folder's
    # names are let go too: a top folder's keys are its names, held by them.
    names = []
    order = sorted(range(len(keys)), key=keys.__getitem__)
    packed_keys = PackedNames.of([keys[i] for i in order])
    del keys
    packed_sizes = PackedSizes.of([sizes[i] for i in order])
    del sizes
    packed_versions = PackedTags.of([versions[i] for i in order])
    del versions, order
    return Walked(
        packed_keys,
        packed_sizes,
        packed_versions,
        len(hidden),
        min(hidden) if hidden else None,
        len(special),
        min(special) if special else None,
        len(other),
        min(other) if other else None,
        top_folders,
    )


#: A folder listed in this thread while it takes under this, plus ``_SLOW_ENTRY_S`` an
#: entry (locally: ~10 us and ~1 us an entry); a network mount's listing waits for
#: round trips (a lookup, a READDIR: ~2.5 ms a folder at 1 ms each).
_SLOW_FOLDER_S = 200e-6
_SLOW_ENTRY_S = 3e-6


class _Listed(NamedTuple):
    folder: str
    dirs: list[str]  # folders, and links to folders (followed)
    names: list[str]  # the rest: files, dangling links, FIFOs...
    linked: list[str]  # those of ``dirs`` that are symbolic links


def _listed(folder: str) -> _Listed:
    """One folder's entries, as :func:`os.walk` sorts them (a link is followed: a link
    to a folder is a folder), and which folders are links: from the listing's types
    (d_type), with no stat of a name but a link's."""
    dirs: list[str] = []
    names: list[str] = []
    linked: list[str] = []
    try:
        entries = os.scandir(folder)
    except FileNotFoundError:  # deleted since its parent was listed: as if listed later
        return _Listed(folder, dirs, names, linked)
    with entries:
        for e in entries:
            try:
                is_dir = e.is_dir()
            except OSError:  # as os.walk: a name that cannot be stat'ed is no folder
                is_dir = False
            if is_dir:
                dirs.append(e.name)
                if e.is_symlink():
                    linked.append(e.name)
            else:
                names.append(e.name)
    return _Listed(folder, dirs, names, linked)


def _entries_s(got: _Listed) -> float:
    """The time a folder's listing may take for its entries, at a local disk's pace."""
    return _SLOW_ENTRY_S * (len(got.dirs) + len(got.names))


def _folders(top: str, fail: Callable[[OSError], None]) -> Iterator[_Listed]:
    """:func:`os.walk` from ``top`` with links followed, a level of folders at a time,
    so that a network mount's folders (ImageNet's 1,000) are listed many at once
    (:class:`Pace`). As :func:`os.walk`, the caller may take names out of ``dirs`` so
    that they are not walked; an error listing a folder goes to ``fail``."""
    pace = Pace(_SLOW_FOLDER_S, _entries_s)
    level = [top]
    while level:
        below: list[str] = []
        try:
            for got in pace.map(_listed, level):
                yield got
                below += [os.path.join(got.folder, d) for d in got.dirs]
        except OSError as exc:
            fail(exc)
            return
        level = below


def refuse_glob_cycles(pattern: str, found: Iterable[str]) -> None:
    """Refuse a recursive pattern's matches (``**``) that went round a symbolic link to a
    folder above it, as :func:`walk` refuses the link: ``glob`` follows it until the path
    is too deep to resolve (40 links), listing each file under it 41 times, silently.
    A folder reached again below itself is the sign (a ``realpath`` of each folder that
    holds a match, not of each file); one reached by two links side by side is kept."""
    seen: dict[str, list[str]] = {}  # each folder's real path: its spellings, shortest first
    # (rpartition: os.path.dirname took 3x as long, ~2 s for ImageNet's 1.28M matches)
    folders = {head or sep for head, sep, _ in (p.rpartition(os.sep) for p in found)}
    for folder in sorted(folders, key=len):
        spellings = seen.setdefault(os.path.realpath(folder), [])
        above = next((s for s in spellings if folder.startswith(s.rstrip(os.sep) + os.sep)), None)
        spellings.append(folder)
        if above is None:
            continue
        link, path = folder, above
        for part in folder[len(above) :].strip(os.sep).split(os.sep):
            path = os.path.join(path, part)
            if os.path.islink(path):
                link = path
                break
        raise ConfigError(
            f"{link}: a symbolic link to {os.path.realpath(link)}, a folder above it: the "
            f"pattern {pattern} would match its files over and over ({folder} is {above} "
            "again); remove the link, or give a pattern that does not pass through it"
        )


#: A gzip-compressed tar's endings (webdataset's ShardWriter gzips a pattern ending in
#: ``gz``): never read, but a listing of tar shards says it left them out.
GZIPPED_TAR = (".tar.gz", ".tgz")


def other_formats(extensions: tuple[str, ...], known: Iterable[str]) -> tuple[str, ...]:
    """The ``known`` extensions (every file format's) that a listing for ``extensions``
    leaves out: ``()`` for a listing that keeps every file. A listing of ``.tar`` shards
    leaves out gzipped ones too (a folder of both read the ``.tar`` ones in silence)."""
    if not extensions:
        return ()
    out = tuple(e for e in known if e not in extensions)
    return out + GZIPPED_TAR if ".tar" in extensions else out


#: The formats ``format="image"`` reads together (``"image"``: the files it alone reads,
#: BMP, TIFF, PPM and PGM).
_IMAGES = ("jpeg", "png", "webp", "image")


def other_skipped(
    count: int, example: str | None, extensions: Sequence[str], fmt: str | None
) -> str:
    """What a listing says of the files of another format it left out (``fmt``, the
    example's format; ``None`` for a gzipped tar, which no format reads)."""
    if fmt is None:
        return (
            f"left out {count:,} file(s) this source does not read (e.g. {example!r}: a "
            "gzip-compressed tar shard, whose members' offsets, which reads by samples use, "
            "the compression hides): gunzip such shards once to read their samples too"
        )
    said = (
        f"left out {count:,} file(s) of another format (e.g. {example!r}): this source reads "
        f"the files ending in {list(extensions)}; "
    )
    if fmt in _IMAGES and set(extensions) & {".jpeg", ".png", ".webp"}:
        # Images of another format beside these (a class tree as ImageFolder reads it): a
        # source of their own would number its classes apart.
        own = f", or read them with a FileSource of their own (format={fmt!r})"
        own = "" if fmt == "image" else own
        return said + (
            "to read them with these (as torchvision's ImageFolder does, to RGB), pass "
            "format='image'" + own
        )
    return said + f"read the others with a FileSource of their own (format={fmt!r})"


def suffixes(names: Iterable[str]) -> Counter[str]:
    """How many of ``names`` end in each extension (lower case; ``""``: none)."""
    return Counter(os.path.splitext(n)[1].lower() for n in names)


def folder_suffixes(root: Path) -> Counter[str]:
    """:func:`suffixes` of the files below ``root``, hidden ones left out (the error
    path of a listing that found none: walked again, not counted on every listing)."""
    found: Counter[str] = Counter()
    for _, dirs, names in os.walk(root, followlinks=True):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found += suffixes(n for n in names if not n.startswith("."))
    return found


def none_found(
    what: str,
    extensions: Sequence[str],
    others: Counter[str],
    hidden: int,
    example: str | None,
    special: str = "",
) -> str:
    """What a listing that found nothing says: the files it holds instead (``others``:
    their extensions) and the hidden ones it left out."""
    if not extensions:
        text = f"no {what} under it"
    else:
        text = f"no {what} ending in {list(extensions)} under it"
    if others:
        held = ", ".join(f"{n:,} {e or '(no extension)'}" for e, n in others.most_common(3))
        text += f"; it holds {held}{', ...' if len(others) > 3 else ''}"
        pillows = sorted(others.keys() & {".bmp", ".ppm", ".pgm"})
        if pillows:
            text += f"; {', '.join(pillows)} files are read by format='image' (to RGB)"
        if others.keys() & {".tif", ".tiff"}:
            text += (
                "; TIFF is not decoded by this format: format='image' reads it as "
                "torchvision's ImageFolder does (to 8-bit RGB: 16-bit colour loses its low "
                "bits; a multi-page stack refused); to keep every bit, convert such files "
                "to PNG (16-bit kept), NPY or HDF5"
            )
        if ".tar" in extensions and others.keys() & {".gz", ".tgz"}:
            text += (
                "; a gzip-compressed tar is not read (its members' offsets, which reads by "
                "samples use, are hidden by the compression): gunzip the shards once"
            )
        if ".tfrecord" in extensions and ".gz" in others:
            text += (
                "; a GZIP-compressed TFRecord is not read (its records are found by offset, "
                "which the compression hides): gunzip the shards once"
            )
    if hidden:
        text += (
            f"; {hidden:,} hidden file(s) or folder(s) (a name starting with '.', e.g. "
            f"{example!r}) were left out: pass a list of paths to read such files"
        )
    if special:
        text += f"; {special}"
    return text
