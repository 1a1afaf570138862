"""One open local file, shared by memory mapping and positional reads."""

from __future__ import annotations

import difflib
import errno
import mmap
import os
import re
import stat
import threading
from typing import Any, cast
from urllib.parse import unquote

import numpy as np
from numpy.typing import NDArray

from headrace._closing import Closing
from headrace.errors import (
    ConfigError,
    ObjectNotFoundError,
    PermissionDeniedError,
    ReadEOFError,
    StorageError,
)
from headrace.io import _in_flight as in_flight
from headrace.io._buffers import read_randomly
from headrace.io._mounts import on_network_fs, stale_mount_of
from headrace.io._resident import resident_ranges

__all__ = ["LocalFile", "eof_error", "file_url_path", "open_error", "read_error"]


def file_url_path(url: str) -> str:
    """The local path a ``file://`` URL names.

    Percent-decoded, as ``Path.as_uri()`` and every URI writer encode it
    (``file:///data/my%20set`` is the folder ``my set``), unless only the path as
    written exists: a URL written by hand (``"file://" + path``) with a name
    holding a literal ``%41`` still names it. Everything after the host is the
    path (a ``#`` or ``?`` in a name is part of it); the host may be empty or
    ``localhost``.
    """
    rest = url.partition("://")[2]
    if rest.startswith("localhost/"):
        rest = rest[len("localhost") :]
    decoded = unquote(rest)
    if decoded != rest and (os.path.exists(decoded) or not os.path.exists(rest)):
        return decoded
    return rest


# A scheme, then a colon with any slashes (s3:/b, s3:b, S3://b) or slashes without the
# colon (s3//b: a local path too, the folder s3/b, but never meant as one).
_TYPO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)(?::/*|//+)(.*)", re.S)
_SCHEMES = ("s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "http", "https")


def url_typo(path: object) -> str | None:
    """The object URL ``path`` was likely meant to be, where it is read as a local path
    for a typo in its scheme (``s3:/b/k``, ``s3:b/k``, ``s3//b/k``, ``S3://b/k``); else
    ``None``."""
    if not isinstance(path, str):
        return None
    m = _TYPO.fullmatch(path)
    if m is None or m.group(1).lower() not in _SCHEMES or not m.group(2):
        return None
    meant = f"{m.group(1).lower()}://{m.group(2)}"
    return None if meant == path else meant


def missing_hint(path: str) -> str:
    """What a local ``path`` that is not there may have meant: ``"; X:// is not a URL
    scheme headrace reads (...)"`` for a URL of a scheme no store reads (``S3://``:
    schemes are matched in lower case), ``"; read as a local path: did you mean
    's3://b/k'?"`` for ``s3:/b/k``, or ``"; did you mean 'data/train.bin'?"`` for a name
    whose folder holds one close to it (a typo); else ``""``. Error paths only."""
    meant = url_typo(path)
    if meant is not None and "://" not in path:  # s3:/b/k: read as a local path
        return f"; read as a local path: did you mean {meant!r}?"
    scheme, sep, _ = path.partition("://")
    if sep and scheme.isalnum():  # a URL of a scheme nobody maps to a store
        return (
            f"; {scheme}:// is not a URL scheme headrace reads "
            "(s3://, gs://, az://, http(s)://, file://)"
        )
    near = _near(path)
    return f"; did you mean {near!r}?" if near else ""


def _near(path: str) -> str | None:
    """The existing path that ``path`` likely misspells: each part that is not there
    replaced by the closest name in the folder above it (among its first 10,000)."""
    parts = path.rstrip("/").split("/")
    for i, part in enumerate(parts):
        folder = "/".join(parts[:i]) or ("/" if path.startswith("/") else ".")
        if not part or os.path.lexists(os.path.join(folder, part)):
            continue
        try:
            with os.scandir(folder) as entries:
                names = [e.name for _, e in zip(range(10_000), entries, strict=False)]
        except OSError:
            return None
        close = difflib.get_close_matches(part, names, n=1, cutoff=0.8)
        if not close:
            return None
        parts[i] = close[0]
    return "/".join(parts) if parts != path.rstrip("/").split("/") else None


#: What a path that opens may be but a file (a block device is read as its bytes).
_NOT_FILES = {stat.S_IFIFO: "FIFO (named pipe)", stat.S_IFSOCK: "socket",
              stat.S_IFCHR: "character device"}  # fmt: skip


def open_error(path: str, exc: OSError) -> StorageError:
    """Map an ``OSError`` from opening ``path`` to headrace's tree."""
    if isinstance(exc, FileNotFoundError):
        if os.path.islink(path):  # dangling: "no such file" of a name that `ls` lists
            return ObjectNotFoundError(
                errno.ENOENT,
                f"{path}: a symbolic link to {os.readlink(path)}, which does not exist "
                "(remove the link or restore its target)",
            )
        return ObjectNotFoundError(errno.ENOENT, f"{path}: no such file{missing_hint(path)}")
    if isinstance(exc, PermissionError):
        return PermissionDeniedError(errno.EACCES, f"{path}: permission denied")
    return StorageError(
        exc.errno or errno.EIO,
        f"{path}: cannot open ({exc.strerror or exc}){slash_hint(path)}{gone_hint(exc, path)}",
    )


def gone_hint(exc: OSError, path: str | None = None) -> str:
    """The fix where ``exc`` says the mount under ``path`` (else ``exc.filename``) is
    gone (ENOTCONN: a FUSE server that stopped, as a network mount's driver that
    crashed), else ``""``. Names the mount point from the mount table, without a stat
    (it said "MNT" until 2026-12-07)."""
    if exc.errno != errno.ENOTCONN:
        return ""
    where = path if path is not None else exc.filename
    held = stale_mount_of(os.fsdecode(where)) if isinstance(where, (str, bytes)) else None
    if held is None:  # detached already: the deepest mount left ("/") is not the one
        return (
            "; the mount it is on is gone (detached: its FUSE server or network file "
            "system driver stopped, or it was unmounted, while the file was open): mount "
            "it again and open the file anew"
        )
    point = held.mount
    return (
        "; the mount it is on is gone (its FUSE server or network file system driver "
        f"stopped): unmount it (fusermount3 -u {point}, or umount -l {point}) and mount "
        "it again"
    )


def slash_hint(path: str) -> str:
    """``"; ... drop the '/'"`` where ``path`` names a file with a ``/`` after its name
    (``train.bin/``: "Not a directory"), else ``""``. Looked into on error paths only."""
    if path.endswith("/") and os.path.isfile(path.rstrip("/")):
        return f"; {path.rstrip('/')} is a file, not a folder: drop the trailing '/'"
    return ""


def read_error(
    path: str, what: str, offset: int, want: int, done: int, exc: OSError
) -> StorageError:
    """A failed read of ``want`` bytes at ``offset``, ``done`` of them read (every engine)."""
    hint = gone_hint(exc, path)
    if not hint and exc.errno == errno.EIO:
        # "Input/output error" alone said what, not where to look or what then.
        hint = (
            "; the disk or the mount's server failed this read: look in the kernel log "
            "(dmesg) or the server's, then read again; where the disk is failing, copy "
            "the file from another copy"
        )
    return StorageError(
        exc.errno or errno.EIO,
        f"{path}: {what} of bytes [{offset}, {offset + want}) failed after {done} bytes: "
        f"{exc.strerror or exc}{hint}",
    )


def eof_error(path: str, offset: int, want: int, done: int, size: int) -> ReadEOFError:
    """A read of ``want`` bytes at ``offset`` that met end of file after ``done``."""
    return ReadEOFError(
        f"{path}: read of bytes [{offset}, {offset + want}) reached end of file after {done} "
        f"bytes (file has {size} bytes)"
    )


class LocalFile(Closing):
    """A file opened once for the lifetime of a reader cache.

    ``pread_into`` completes short reads and raises :class:`ReadEOFError`
    naming the path and range when the file ends first. ``mapped`` is a
    read-only memory map of the same descriptor, made on first use, so both
    paths see one file and a remote mount pays for one open.
    ``direct_fd`` is a second descriptor of the same path opened with
    ``O_DIRECT`` on first use (it needs its own open: the flag would force
    alignment on every buffered read of the shared one).
    """

    __slots__ = (
        "_dfd",
        "_fd",
        "_lock",
        "_map",
        "_network",
        "_unmappable",
        "identity",
        "path",
        "size",
    )

    def __init__(self, path: str | os.PathLike[str]) -> None:
        # Set first, so the finaliser of a half-made LocalFile has nothing to close: a
        # descriptor closed below may already belong to another file when it runs.
        self._fd = -1
        self._dfd = -1
        self._map: mmap.mmap | None = None
        self._network: bool | None = None
        self._unmappable = False
        self.path = os.fspath(path)
        fd = -1
        try:  # whatever is raised before it is kept, the descriptor is closed
            # In flight while it runs: an open on a hung mount waits as long as a read.
            with in_flight.Waiting("open", self.path):
                try:
                    # O_NONBLOCK: a FIFO's open waited for a writer, for ever (cleared
                    # below).
                    fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
                    st = os.fstat(fd)
                except OSError as exc:
                    raise open_error(self.path, exc) from exc
            if stat.S_ISDIR(st.st_mode):  # it opens, and its size is the directory's
                raise StorageError(
                    errno.EISDIR,
                    f"{self.path}: is a directory, not a file: give a file in it (or, "
                    "where a list of files is taken, its files)",
                )
            kind = _NOT_FILES.get(stat.S_IFMT(st.st_mode))
            if kind is not None:  # no size, no offsets: "past the end of 0 bytes" said nothing
                raise StorageError(
                    errno.EINVAL,
                    f"{self.path}: is a {kind}, not a file: there is no size or offset to "
                    "read ranges at; copy what it gives into a file and read that",
                )
            os.set_blocking(fd, True)
            self._fd = fd
        except BaseException:
            # A Ctrl-C too (as the open's in-flight mark came down): until 2026-12-07 only
            # an OSError closed it, and an interrupt leaked the descriptor.
            if fd >= 0 and self._fd != fd:
                os.close(fd)
            raise
        self.size: int = st.st_size
        #: ``(st_dev, st_ino)`` when opened: a reopen of the path is the same file only
        #: if they match (a file renamed over it is another one).
        self.identity: tuple[int, int] = (st.st_dev, st.st_ino)
        # Readers share one LocalFile across I/O threads; the lazy map and
        # O_DIRECT descriptor must be made once, or the losers' handles leak.
        self._lock = threading.Lock()

    @property
    def fd(self) -> int:
        if self._fd < 0:
            raise StorageError(errno.EBADF, f"{self.path}: file is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def current_size(self) -> int:
        """The file's size now (``size`` is the size when it was opened). A failed
        ``fstat`` names the file: on a mount whose server was killed it is ENOTCONN, and
        a mapped read's check of the size raised it bare, naming no file and no fix."""
        try:
            return os.fstat(self.fd).st_size
        except StorageError:
            raise
        except OSError as exc:
            raise StorageError(
                exc.errno or errno.EIO,
                f"{self.path}: cannot stat ({exc.strerror or exc}){gone_hint(exc, self.path)}",
            ) from exc

    @property
    def direct_fd(self) -> int:
        """A descriptor opened with ``O_DIRECT`` (on first use).

        Raises :class:`ConfigError` where the platform or filesystem refuses
        ``O_DIRECT`` (tmpfs, some FUSE and network mounts answer ``EINVAL``).
        """
        if self._dfd >= 0:
            return self._dfd
        with self._lock:
            if self._dfd >= 0:
                return self._dfd
            self._check_open()
            flag = getattr(os, "O_DIRECT", 0)
            if not flag:
                raise ConfigError(f"{self.path}: O_DIRECT is not available on this platform.")
            # Reopened through the descriptor, not the path: a file deleted or renamed
            # over since it was opened is still the one every other read of it sees.
            again = f"/proc/self/fd/{self._fd}"
            if not os.path.exists(again):  # no /proc: the path, checked to be the same file
                again = self.path
            dfd = -1
            try:  # closed whatever is raised before it is kept (a Ctrl-C too)
                try:
                    with in_flight.Waiting("open", self.path):
                        dfd = os.open(again, os.O_RDONLY | os.O_CLOEXEC | flag)
                except OSError as exc:
                    if exc.errno == errno.EINVAL:
                        raise ConfigError(
                            f"{self.path}: the filesystem does not support O_DIRECT (open "
                            "answered EINVAL); use strategy 'pread' or 'adaptive' instead."
                        ) from exc
                    raise open_error(self.path, exc) from exc
                what = "the descriptor it was opened with"
                try:
                    a = os.fstat(self._fd)
                    what = "the descriptor reopened with O_DIRECT"
                    b = os.fstat(dfd)
                except OSError as exc:  # the open succeeded: "cannot open" said otherwise
                    raise StorageError(
                        exc.errno or errno.EIO,
                        f"{self.path}: cannot stat {what}, to check they are one file "
                        f"({exc.strerror or exc}){gone_hint(exc, self.path)}",
                    ) from exc
                if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
                    raise StorageError(
                        errno.ESTALE,
                        f"{self.path}: the file was replaced since it was opened (another "
                        "file now has its name); O_DIRECT cannot reopen the one opened",
                    )
                self._dfd = dfd
            except BaseException:
                if dfd >= 0 and self._dfd != dfd:
                    os.close(dfd)
                raise
            return dfd

    def _check_open(self) -> None:
        if self._fd < 0:
            raise StorageError(errno.EBADF, f"{self.path}: file is closed")

    def pread_into(self, buf: memoryview | NDArray[np.generic], offset: int) -> None:
        """Fill ``buf`` with the bytes at ``offset``; short reads are retried."""
        view = memoryview(cast(Any, buf)).cast("B")
        want = len(view)
        done = 0
        key = in_flight.begin(self.path, offset, offset + want)
        try:
            while done < want:
                try:
                    # EINTR is retried by os.preadv itself (PEP 475).
                    n = os.preadv(self.fd, [view[done:]], offset + done)
                except OSError as exc:
                    raise read_error(self.path, "read", offset, want, done, exc) from exc
                if n == 0:
                    raise eof_error(self.path, offset, want, done, os.fstat(self.fd).st_size)
                done += n
        finally:
            in_flight.end(key)

    def pread(self, offset: int, length: int) -> NDArray[np.uint8]:
        """A new array holding ``length`` bytes at ``offset``."""
        out = np.empty(length, dtype=np.uint8)
        self.pread_into(out, offset)
        return out

    @property
    def mapped(self) -> mmap.mmap:
        """A read-only memory map of the whole file (made on first use).

        Raises :class:`ConfigError` where the filesystem cannot map files (FUSE
        mounts with ``direct_io``, sysfs answer ``ENODEV``), :class:`StorageError`
        naming the path for any other refusal.
        """
        m = self._map
        if m is None:
            with self._lock:
                if self._map is None:
                    if self.size == 0:
                        raise ReadEOFError(f"{self.path}: cannot map an empty file")
                    self._map = self._map_file()
                m = self._map
        return m

    def _map_file(self) -> mmap.mmap:
        if self._unmappable:
            raise self._unmappable_error()
        try:
            m = mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            if exc.errno == errno.ENODEV:
                self._unmappable = True
                raise self._unmappable_error() from exc
            hint = ""
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                # Python's mmap keeps a duplicate of the descriptor: a mapped file costs two.
                hint = "; each mapped file holds two descriptors: raise the limit (ulimit -n)"
            raise StorageError(
                exc.errno or errno.EIO,
                f"{self.path}: cannot memory-map the file ({exc.strerror or exc}){hint}",
            ) from exc
        # Readers copy rows out of the map, or populate the runs they want (asking for
        # them first): a fault must not read the read-around about it (read_randomly).
        view = np.frombuffer(m, dtype=np.uint8)
        read_randomly(view.ctypes.data, view.size)
        del view  # an array over the map would keep close() from unmapping it
        return m

    def _unmappable_error(self) -> ConfigError:
        return ConfigError(
            f"{self.path}: the filesystem does not support memory mapping (mmap answered "
            "ENODEV); use strategy 'pread' or 'adaptive' instead."
        )

    @property
    def mappable(self) -> bool:
        """Whether the file can be mapped: ``False`` where its filesystem refuses maps
        (``ENODEV``); maps it on first use. An empty file counts as mappable (there is
        nothing to map, and nothing to read)."""
        if self._map is not None or self.size == 0:
            return True
        try:
            _ = self.mapped
        except ConfigError:
            return False
        return True

    @property
    def network(self) -> bool:
        """Whether the file lies on a network or FUSE mount (asked on first use, by
        mapped readers only; once per folder: :func:`~headrace.io._mounts.on_network_fs`)."""
        if self._network is None:
            self._network = on_network_fs(self.path)
        return self._network

    def resident(self, offsets: NDArray[np.int64], lengths: NDArray[np.int64]) -> NDArray[np.bool_]:
        """Per range: whether the pages it lies on are in memory now (a hint: see
        :mod:`headrace.io._resident`). Call only for ranges inside the map."""
        view = np.frombuffer(self.mapped, dtype=np.uint8)
        try:
            return resident_ranges(view.ctypes.data, offsets, lengths)
        finally:
            del view  # an array over the map would keep close() from unmapping it

    def close(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                # Arrays still view the map; it is freed when they are.
                pass
            self._map = None
        if self._dfd >= 0:
            os.close(self._dfd)
            self._dfd = -1
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        # A source or loader that is dropped without close() (a loop left by break or
        # an exception, a loader made per epoch) must not keep its descriptors open.
        if self._fd >= 0:
            self.close()

    def __repr__(self) -> str:
        return f"LocalFile({self.path!r}, size={self.size})"
