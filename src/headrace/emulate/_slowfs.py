"""slowfs: a read-only FUSE passthrough that makes a local directory behave like slow storage.

Every open sleeps ``open_latency_ms``, every lookup, stat and folder listing
``stat_latency_ms``, every FUSE READ sleeps ``read_latency_ms`` and then waits
for its bytes on a shared token bucket (``mbps``). libfuse runs requests on up
to ``max_threads`` worker threads, and ``time.sleep`` and ``os.pread`` release
the GIL, so concurrent READs pay their latency in parallel, as they would
against a network file system.

Kernel facts that shape what a client sees (Linux 6.x, libfuse 3.14):

* The kernel, not the client, sizes READs. Through the page cache, random 4 KiB
  preads arrive as 4 KiB READs, sequential reads as 128 KiB readahead, and mmap
  faults as ~128 KiB read-around unless ``MADV_RANDOM``. Those are "background"
  requests, capped in flight by ``max_background`` (kernel default 12).
* ``direct_io`` turns each read(2) into READs of its own size (up to 1 MiB), but
  libfuse 3.14 does not ask for FUSE_DIRECT_IO_ALLOW_MMAP, so mmap fails with ENODEV.
* The mount uses neither ``kernel_cache`` nor ``auto_cache``: each open drops the
  file's page cache, so every fresh open starts cold, like a remote mount that
  does not trust its cache across opens.

``fail_reads`` (``--fail-reads GLOB[:START-END]``) makes READs of chosen files
and bytes fail with an errno (see :mod:`headrace.emulate._slowfs_faults`).

Run it with ``headrace emulate slowfs SRC MNT`` or ``python -m
headrace.emulate._slowfs SRC MNT``; stop it with SIGINT, SIGTERM or
``fusermount3 -u MNT``.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

from headrace._messages import said
from headrace._output_path import check_output_path
from headrace.emulate._lifeline import on_parent_exit
from headrace.emulate._mounts import is_mounted, not_a_folder
from headrace.emulate._slowfs_config import SlowFSConfig
from headrace.emulate._slowfs_faults import ReadFault, errno_code, errno_name
from headrace.emulate._slowfs_stats import SlowFSStats
from headrace.emulate._token_bucket import TokenBucket
from headrace.errors import ConfigError, HeadraceError, StorageError

__all__ = ["SlowPassthrough", "check", "configure", "main", "run", "serve"]

# The bucket lets one 128 KiB readahead request through without waiting, so a
# cap far above the traffic costs nothing, while the long-run rate stays exact.
_BURST_BYTES = 128 * 1024

# fuse_main_real's return code when its loop ended with an error; libfuse 3.14's
# SIGINT/SIGTERM handler records the signal as that error, so after a mount
# succeeded this is how a signalled, clean stop looks from Python.
_LOOP_ENDED_BY_SIGNAL = 8

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _erofs() -> OSError:
    return OSError(errno.EROFS, os.strerror(errno.EROFS))


def _refuse(*_args: Any) -> int:
    raise _erofs()


class SlowPassthrough:
    """The FUSE operations; mfusepy calls these on libfuse's worker threads.

    Not a subclass of ``mfusepy.Operations`` so that this module imports without
    libfuse: operations left undefined answer ENOSYS, and every mutating one is
    defined here to answer EROFS (the mount is also ``ro``, so the kernel
    usually refuses first).
    """

    # Timestamps in nanoseconds: exact, and it silences mfusepy's float-time warning.
    use_ns = True

    def __init__(self, root: str, config: SlowFSConfig, stats: SlowFSStats) -> None:
        self.root = os.path.realpath(root)
        self.config = config
        self.stats = stats
        self._read_latency_s = config.read_latency_ms / 1e3
        self._open_latency_s = config.open_latency_ms / 1e3
        self._stat_latency_s = config.stat_latency_ms / 1e3
        self._bucket = TokenBucket(config.mbps * 1e6, _BURST_BYTES) if config.mbps > 0 else None
        self.mounted = False
        # fh -> the faults of its file, matched once at open: mfusepy may pass no
        # path to read(), and a READ then costs one dict lookup.
        self._faults: dict[int, tuple[ReadFault, ...]] = {}

    def _real(self, path: str) -> str:
        # The kernel hands us normalised absolute paths (no "..", no "//").
        return os.path.join(self.root, path.lstrip("/"))

    # lifecycle ---------------------------------------------------------------
    def init_with_config(self, conn: Any, config: Any) -> None:
        if conn is not None:
            conn.max_background = self.config.max_background
            # Past the congestion threshold the kernel marks the bdi congested and
            # readahead backs off; keep it at the kernel's own 3/4 ratio.
            conn.congestion_threshold = max(1, self.config.max_background * 3 // 4)
        if config is not None:
            config.direct_io = int(self.config.direct_io)
            config.kernel_cache = 0
            config.auto_cache = 0
        self.mounted = True
        self.stats.start()

    def destroy(self, _path: str) -> None:
        # A write that fails here would vanish inside libfuse; serve() writes the
        # final snapshot again and reports it.
        with contextlib.suppress(OSError):
            self.stats.stop()

    # metadata ----------------------------------------------------------------
    def getattr(self, path: str, fh: int | None = None) -> dict[str, int]:
        # Both a name's LOOKUP and a GETATTR come here (mfusepy's high-level API).
        self.stats.stat_started()
        try:
            if self._stat_latency_s:
                time.sleep(self._stat_latency_s)
            st = os.fstat(fh) if fh is not None else os.lstat(self._real(path))
        finally:
            self.stats.stat_finished()
        # Drop write bits: the mount is read-only, and tools (cp, rsync) check them.
        mode = st.st_mode & ~0o222
        return {
            "st_mode": mode,
            "st_ino": st.st_ino,
            "st_nlink": st.st_nlink,
            "st_uid": st.st_uid,
            "st_gid": st.st_gid,
            "st_size": st.st_size,
            "st_blocks": st.st_blocks,
            "st_atime": st.st_atime_ns,
            "st_mtime": st.st_mtime_ns,
            "st_ctime": st.st_ctime_ns,
        }

    def access(self, path: str, amode: int) -> int:
        if amode & os.W_OK:
            raise _erofs()
        if not os.access(self._real(path), amode):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
        return 0

    def readdir(self, path: str, _fh: int) -> list[tuple[str, dict[str, int], int]]:
        # Each entry with its type (the d_type a scandir sees), as NFS, CephFS, Lustre,
        # JuiceFS and gcsfuse report it: a walk knows a folder from a file without a
        # stat of each name. (Names alone are DT_UNKNOWN, and cost a LOOKUP apiece.)
        self.stats.listing_started()
        try:
            if self._stat_latency_s:
                time.sleep(self._stat_latency_s)
            with os.scandir(self._real(path)) as listed:
                entries = sorted(listed, key=lambda e: e.name)
        finally:
            self.stats.listing_finished()
        dirs = {"st_mode": stat.S_IFDIR}
        names: list[tuple[str, dict[str, int], int]] = [(".", dirs, 0), ("..", dirs, 0)]
        for e in entries:
            kind = _entry_type(e)
            if kind is not None:
                names.append((e.name, {"st_mode": kind}, 0))
        return names

    def readlink(self, path: str) -> str:
        return os.readlink(self._real(path))

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self._real(path))
        return {
            "f_bsize": sv.f_bsize,
            "f_frsize": sv.f_frsize,
            "f_blocks": sv.f_blocks,
            "f_bfree": 0,
            "f_bavail": 0,
            "f_files": sv.f_files,
            "f_ffree": 0,
            "f_favail": 0,
            "f_namemax": sv.f_namemax,
        }

    # data --------------------------------------------------------------------
    def open(self, path: str, flags: int) -> int:
        if self._open_latency_s:
            time.sleep(self._open_latency_s)
        if flags & _WRITE_FLAGS:
            self.stats.open_done(ok=False)
            raise _erofs()
        try:
            fd = os.open(self._real(path), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.stats.open_done(ok=False)
            raise
        self.stats.open_done(ok=True)
        if self.config.fail_reads:
            rel = path.lstrip("/")
            faults = tuple(f for f in self.config.fail_reads if f.matches(rel))
            if faults:
                self._faults[fd] = faults
        return fd

    def read(self, _path: str | None, size: int, offset: int, fh: int) -> bytes:
        self.stats.read_started(size)
        nbytes = -1
        latency_s = throttle_s = 0.0
        try:
            if self._read_latency_s:
                t0 = time.monotonic()
                time.sleep(self._read_latency_s)
                latency_s = time.monotonic() - t0
            faults = self._faults.get(fh)
            if faults and any(f.overlaps(offset, size) for f in faults):
                # After the latency: a soft mount's error comes after its timeout.
                code = self.config.fail_errno
                raise OSError(code, os.strerror(code))
            data = os.pread(fh, size, offset)
            if self._bucket is not None and data:
                # The request pays its latency first, then its transfer on the
                # shared link: serial time = latency + size / rate, as on a network.
                wait = self._bucket.reserve(len(data))
                if wait > 0:
                    time.sleep(wait)
                    throttle_s = wait
            nbytes = len(data)
            return data
        finally:
            self.stats.read_finished(nbytes, latency_s=latency_s, throttle_s=throttle_s)

    def release(self, _path: str | None, fh: int) -> int:
        self._faults.pop(fh, None)
        os.close(fh)
        return 0

    # Every call that would change the tree answers EROFS, whatever its arguments.
    create = write = truncate = unlink = rmdir = mkdir = mknod = rename = staticmethod(_refuse)
    link = symlink = chmod = chown = utimens = setxattr = removexattr = staticmethod(_refuse)


def _entry_type(entry: os.DirEntry[str]) -> int | None:
    """The file type of a listed entry (``S_IFREG``...), or None once it is gone.

    From the listing's own d_type where it has one, with no syscall: a lstat of each
    entry cost the server a call per file, and failed the whole READDIR with ENOENT
    when a file was removed between the listing and its stat (until 2026-12-06).
    """
    if entry.is_symlink():
        return stat.S_IFLNK
    if entry.is_dir(follow_symlinks=False):
        return stat.S_IFDIR
    if entry.is_file(follow_symlinks=False):
        return stat.S_IFREG
    try:  # a fifo, socket or device, or a file system that gives no d_type
        return stat.S_IFMT(entry.stat(follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return None  # removed since it was listed: as if listed a moment later


def _mounted(mnt: str) -> ConfigError:
    return ConfigError(
        f"slowfs: {mnt!r} is already a mount point; unmount it first: `fusermount3 -u {mnt}` "
        "(also a mount a killed server left behind, where `ls` says 'Transport endpoint is "
        "not connected')."
    )


def _check_dirs(src: str, mnt: str) -> None:
    if not os.path.isdir(src):
        raise not_a_folder(f"slowfs: source {src!r}", src, "give an existing one.")
    # Before a stat of it: a mount left by a killed server answers none (ENOTCONN).
    if is_mounted(mnt):
        raise _mounted(mnt)
    if not os.path.isdir(mnt):
        raise not_a_folder(f"slowfs: mount point {mnt!r}", mnt, "create it first.")
    real_src, real_mnt = os.path.realpath(src), os.path.realpath(mnt)
    if is_mounted(real_mnt):  # a symlink to a mount point
        raise _mounted(mnt)
    if real_mnt == real_src or real_mnt.startswith(real_src.rstrip("/") + "/"):
        raise ConfigError(
            f"slowfs: mount point {mnt!r} is inside the source {src!r}: the mount would show "
            "itself inside itself, without end; mount it elsewhere."
        )
    if os.listdir(mnt):
        raise ConfigError(
            f"slowfs: mount point {mnt!r} is not empty: the mount would hide what is there; "
            "give an empty directory."
        )


def _mfusepy() -> Any:
    """mfusepy, loaded; a :class:`StorageError` naming the installs where it cannot be."""
    try:
        import mfusepy
    except (ImportError, OSError) as exc:
        # mfusepy loads libfuse at import; both a missing module and a missing
        # libfuse3.so land here.
        raise StorageError(
            errno.ENOSYS,
            f"slowfs: cannot load mfusepy/libfuse3 ({exc}); "
            "install with `pip install 'headrace[emulate]'` (mfusepy) and "
            "`apt-get install fuse3`",
        ) from exc
    return mfusepy


def serve(src: str, mnt: str, config: SlowFSConfig, *, stats_file: str | None = None) -> int:
    """Mount ``src`` at ``mnt`` and serve in the foreground until unmounted or signalled.

    libfuse installs its own SIGINT/SIGTERM/SIGHUP handlers for the duration:
    they end the request loop, and libfuse then unmounts. Returns 0 on a clean
    stop; raises :class:`StorageError` when libfuse cannot be loaded or the
    mount fails.
    """
    src = os.path.abspath(src)
    mnt = os.path.abspath(mnt)
    # libfuse moves the process to / once mounted: a relative stats file would land there.
    stats_file = None if stats_file is None else os.path.abspath(stats_file)
    _check_dirs(src, mnt)
    # Where fusermount3 mounts, and the mount table says it did, when MNT is a symlink:
    # the checks for a mount left behind look there.
    mnt = os.path.realpath(mnt)
    mfusepy = _mfusepy()
    stats = SlowFSStats(
        stats_file,
        interval_s=config.stats_interval_s,
        header={
            "pid": os.getpid(),
            "src": src,
            "mnt": mnt,
            "config": {
                "read_latency_ms": config.read_latency_ms,
                "open_latency_ms": config.open_latency_ms,
                "stat_latency_ms": config.stat_latency_ms,
                "mbps": config.mbps,
                "max_background": config.max_background,
                "max_threads": config.max_threads,
                "direct_io": config.direct_io,
                "fail_reads": [f.to_spec() for f in config.fail_reads],
                "fail_errno": errno_name(config.fail_errno),
            },
        },
    )
    try:
        # Once mounted, a failed write only surfaces inside libfuse's init, which
        # swallows it: find out now, while the message can still reach the user.
        stats.write()
    except OSError as exc:
        raise StorageError(
            exc.errno,
            f"slowfs: cannot write the stats file {stats_file!r} ({exc.strerror}); "
            "give a path in an existing, writable directory",
        ) from exc
    ops = SlowPassthrough(src, config, stats)
    on_parent_exit(partial(_detach, mnt))
    try:
        mfusepy.FUSE(
            ops,
            mnt,
            foreground=True,
            ro=True,
            fsname="headrace-slowfs",
            subtype="headrace-slowfs",
            max_threads=config.max_threads,
            # Idle workers are kept rather than torn down after each burst, so
            # a burst of N parallel READs does not pay thread start-up each time.
            max_idle_threads=config.max_threads,
        )
    except RuntimeError as exc:
        if ops.mounted and exc.args == (_LOOP_ENDED_BY_SIGNAL,):
            return 0
        raise StorageError(
            errno.EIO, f"slowfs: mounting {src!r} at {mnt!r} failed (libfuse said {exc})"
        ) from exc
    finally:
        try:
            stats.stop()  # idempotent: destroy() may have written the final snapshot already
        except OSError as exc:
            # The file system was served; a lost last snapshot is worth a line, not a traceback.
            print(f"slowfs: could not write the final stats: {exc}", file=sys.stderr, flush=True)
        if is_mounted(mnt):
            # libfuse unmounts on a clean exit; this covers a loop that died early.
            fusermount = shutil.which("fusermount3")
            if fusermount is not None:
                subprocess.run([fusermount, "-u", "-z", mnt], check=False)
    return 0


def _detach(mnt: str, wait_s: float = 5.0) -> None:
    """Under the lifeline, once the parent is gone: detach the mount (lazily) before the
    SIGTERM, which would leave it behind if it came between the mount and libfuse's
    handler; a server still starting is given ``wait_s`` to mount first."""
    deadline = time.monotonic() + wait_s
    while not is_mounted(mnt) and time.monotonic() < deadline:
        time.sleep(0.02)
    fusermount = shutil.which("fusermount3")
    if fusermount is not None and is_mounted(mnt):
        subprocess.run([fusermount, "-u", "-z", mnt], check=False, capture_output=True)


# command line -----------------------------------------------------------------
def configure(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``headrace emulate slowfs``."""
    d = SlowFSConfig()
    parser.add_argument("src", metavar="SRC", help="directory to serve (read-only)")
    parser.add_argument("mnt", metavar="MNT", help="empty directory to mount it at")
    parser.add_argument(
        "--read-latency-ms",
        type=float,
        default=d.read_latency_ms,
        help="sleep before every FUSE READ (default: %(default)s)",
    )
    parser.add_argument(
        "--open-latency-ms",
        type=float,
        default=d.open_latency_ms,
        help="sleep in every open (default: %(default)s)",
    )
    parser.add_argument(
        "--stat-latency-ms",
        type=float,
        default=d.stat_latency_ms,
        help="sleep in every lookup, stat and folder listing (default: %(default)s)",
    )
    parser.add_argument(
        "--mbps",
        type=float,
        default=d.mbps,
        help="shared bandwidth cap in MB/s (10^6 bytes/s); 0 = none (default: %(default)s)",
    )
    parser.add_argument(
        "--max-background",
        type=int,
        default=d.max_background,
        help="page-cache READs the kernel keeps in flight (kernel default 12; "
        "default here: %(default)s)",
    )
    parser.add_argument(
        "--max-threads",
        type=int,
        default=d.max_threads,
        help="libfuse worker threads (default: %(default)s)",
    )
    parser.add_argument(
        "--direct-io",
        action="store_true",
        help="bypass the page cache: READs of the caller's size; mmap fails with ENODEV",
    )
    parser.add_argument(
        "--fail-reads",
        action="append",
        default=[],
        metavar="GLOB[:START-END]",
        help="fail READs of files matching GLOB (relative to the mount; * also matches /) "
        "that overlap bytes [START, END) (END exclusive; START- or -END open); repeatable",
    )
    parser.add_argument(
        "--fail-errno",
        default=errno_name(d.fail_errno),
        help="the errno failed READs answer, by name or number (default: %(default)s)",
    )
    parser.add_argument(
        "--stats-file",
        default=None,
        help="write JSON counters here periodically and on exit",
    )
    parser.add_argument(
        "--stats-interval-s",
        type=float,
        default=d.stats_interval_s,
        help="seconds between stats-file writes (default: %(default)s)",
    )


def config_from_args(args: argparse.Namespace) -> SlowFSConfig:
    return SlowFSConfig(
        read_latency_ms=args.read_latency_ms,
        open_latency_ms=args.open_latency_ms,
        stat_latency_ms=args.stat_latency_ms,
        mbps=args.mbps,
        max_background=args.max_background,
        max_threads=args.max_threads,
        direct_io=args.direct_io,
        stats_interval_s=args.stats_interval_s,
        fail_reads=tuple(ReadFault.parse(spec) for spec in args.fail_reads),
        fail_errno=errno_code(args.fail_errno),
    )


def check(args: argparse.Namespace) -> None:
    """What ``headrace emulate slowfs`` refuses before it looks at the folders or mounts:
    its options (``--fail-reads`` specs, ``--fail-errno`` names ...)."""
    config_from_args(args)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM or ``fusermount3 -u MNT``; 0 on a clean stop."""
    try:
        config = config_from_args(args)
        _check_dirs(os.path.abspath(args.src), os.path.abspath(args.mnt))
        if args.stats_file is not None:
            # Checked with the other refusals, before "mounting" is said: a stats file in a
            # missing folder failed after it, with exit 1 (until 2026-12-06).
            check_output_path("--stats-file", args.stats_file)
        # Before "mounting" is said too: it was said, then the missing extra, with exit 1.
        _mfusepy()
    except StorageError as exc:
        print(f"headrace emulate: {said(exc)}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        # By the flags given: it read "error: SlowFSConfig.read_latency_ms must be ...".
        text = re.sub(r"SlowFSConfig\.(\w+)", lambda m: "--" + m[1].replace("_", "-"), str(exc))
        print(f"headrace emulate: {text}", file=sys.stderr)
        return 2
    print(
        f"slowfs: mounting {args.src} at {args.mnt} (read {config.read_latency_ms} ms, "
        f"open {config.open_latency_ms} ms, stat {config.stat_latency_ms} ms, "
        + (f"cap {config.mbps} MB/s" if config.mbps else "no bandwidth cap")
        + "".join(
            f", failing READs of {f.to_spec()} with {errno_name(config.fail_errno)}"
            for f in config.fail_reads
        )
        + "); "
        f"stop with Ctrl-C or `fusermount3 -u {args.mnt}`",
        file=sys.stderr,
        flush=True,
    )
    try:
        return serve(args.src, args.mnt, config, stats_file=args.stats_file)
    except HeadraceError as exc:
        print(f"headrace emulate: {said(exc)}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m headrace.emulate._slowfs",
        description="Read-only FUSE passthrough with injected latency.",
    )
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
