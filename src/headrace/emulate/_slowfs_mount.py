"""Mount slowfs from Python: a context manager for tests and the bench, and a FUSE check."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import headrace
from headrace.emulate._lifeline import argv_for
from headrace.emulate._mounts import is_mounted, not_a_folder
from headrace.emulate._slowfs_config import SlowFSConfig
from headrace.errors import ConfigError, StateError, StorageError

__all__ = ["SlowMount", "check_fuse", "fuse_available"]

_POLL_S = 0.02


class SlowMount:
    """A slowfs server in a subprocess, mounted for the duration of a ``with`` block.

    ``SlowMount(src, mnt, read_latency_ms=10)`` is short for
    ``SlowMount(src, mnt, SlowFSConfig(read_latency_ms=10))``. Entering starts
    ``python -m headrace.emulate._slowfs`` and waits until ``mnt`` appears in the
    mount table; leaving runs ``fusermount3 -u``, waits for the process, and
    escalates to SIGTERM, SIGKILL and a lazy unmount only if it does not exit.
    ``mnt`` is created if missing. Counters come from :meth:`stats`; the last
    snapshot stays in :attr:`final_stats` after exit.
    """

    def __init__(
        self,
        src: str | os.PathLike[str],
        mnt: str | os.PathLike[str],
        config: SlowFSConfig | None = None,
        /,
        *,
        stats_file: str | os.PathLike[str] | None = None,
        mount_timeout_s: float = 15.0,
        **config_fields: Any,
    ) -> None:
        base = config if config is not None else SlowFSConfig()
        try:
            self.config = dataclasses.replace(base, **config_fields)
        except TypeError as exc:
            fields = sorted(f.name for f in dataclasses.fields(SlowFSConfig))
            raise ConfigError(
                f"SlowMount got an unknown option ({exc}); allowed: {', '.join(fields)}."
            ) from exc
        if not mount_timeout_s > 0:
            raise ConfigError(f"SlowMount mount_timeout_s must be > 0 (got {mount_timeout_s!r}).")
        self.src = Path(src).absolute()
        self.mnt = Path(mnt).absolute()
        self.mount_timeout_s = float(mount_timeout_s)
        self._own_dir: str | None = None
        self._stats_file = None if stats_file is None else Path(stats_file).absolute()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self.returncode: int | None = None
        self.final_stats: dict[str, Any] | None = None

    # lifecycle ---------------------------------------------------------------
    @property
    def pid(self) -> int:
        if self._proc is None:
            raise StateError(f"SlowMount({self.mnt}): not started; use `with SlowMount(...)`.")
        return self._proc.pid

    @property
    def stats_file(self) -> Path:
        if self._stats_file is None:
            raise StateError(f"SlowMount({self.mnt}): not started; no stats file yet.")
        return self._stats_file

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Self:
        if self._proc is not None:
            raise StateError(f"SlowMount({self.mnt}): already started (pid {self._proc.pid}).")
        if not os.path.isdir(self.src):  # (Path.is_dir raised ENOTCONN under a dead mount)
            raise not_a_folder(f"SlowMount: source {self.src}", self.src, "give an existing one.")
        if is_mounted(self.mnt):
            raise StorageError(
                errno.EBUSY,
                f"SlowMount: {self.mnt} is already a mount point; unmount it first: "
                f"`fusermount3 -u {self.mnt}`.",
            )
        self.mnt.mkdir(exist_ok=True)
        # fusermount3 mounts at the folder a symlink leads to, and the mount table names
        # that folder: looked for under the link, the mount never appeared (a timeout).
        real = Path(os.path.realpath(self.mnt))
        if real != self.mnt:
            if is_mounted(real):
                raise StorageError(
                    errno.EBUSY, f"SlowMount: {self.mnt} leads to {real}, already a mount point."
                )
            self.mnt = real
        self._own_dir = tempfile.mkdtemp(prefix="headrace-slowfs-")
        if self._stats_file is None:
            self._stats_file = Path(self._own_dir) / "stats.json"
        self._log = open(os.path.join(self._own_dir, "server.log"), "w+b")
        env = dict(os.environ)
        # The child must import this very headrace, even when the caller found it
        # through sys.path edits (e.g. PYTHONPATH=src in a worktree).
        pkg_root = str(Path(headrace.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
        argv = argv_for(
            "headrace.emulate._slowfs",
            str(self.src),
            str(self.mnt),
            *self.config.to_argv(),
            f"--stats-file={self._stats_file}",
        )
        # A new session keeps a Ctrl-C meant for the caller from killing the
        # server before the caller has unmounted; the lifeline pipe on stdin
        # unmounts and stops it when the caller dies, even by SIGKILL.
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            self._wait_mounted()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_mounted(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.mount_timeout_s
        while not is_mounted(self.mnt):
            if self._proc.poll() is not None:
                raise StorageError(
                    errno.EIO,
                    f"SlowMount: the slowfs server for {self.mnt} exited with code "
                    f"{self._proc.returncode} before mounting: {self.server_log()}",
                )
            if time.monotonic() > deadline:
                raise StorageError(
                    errno.ETIMEDOUT,
                    f"SlowMount: {self.mnt} did not appear in /proc/self/mounts within "
                    f"{self.mount_timeout_s:g} s: {self.server_log()}",
                )
            time.sleep(_POLL_S)
        # The mount shows in /proc/mounts before the server has answered the kernel's
        # INIT; a stop signalled in between ended its loop before it counted as
        # mounted, and it exited 1 ("mounting failed"; seen under load). A stat of the
        # root is a request the kernel holds until INIT is answered: after it the
        # server is serving.
        try:
            os.stat(self.mnt)
        except OSError as exc:
            raise StorageError(
                exc.errno or errno.EIO,
                f"SlowMount: {self.mnt} appeared but does not answer ({exc.strerror}): "
                f"{self.server_log()}",
            ) from exc

    def server_log(self, limit: int = 2000) -> str:
        """The tail of the server's stdout and stderr, for error messages."""
        if self._log is None or self._log.closed:
            return "(no log)"
        self._log.flush()
        self._log.seek(0)
        text: str = self._log.read().decode("utf-8", "replace").strip()
        return text[-limit:] if text else "(empty log)"

    def stop(self, timeout_s: float = 10.0) -> None:
        """Unmount, wait for the server, and collect its final stats. Safe to call twice."""
        proc = self._proc
        if proc is None or self.returncode is not None:
            return
        fusermount = shutil.which("fusermount3")
        unmounted = False
        if proc.poll() is None and is_mounted(self.mnt) and fusermount is not None:
            # The clean way: the server sees the unmount, finishes and exits 0.
            done = subprocess.run(
                [fusermount, "-u", str(self.mnt)], capture_output=True, check=False
            )
            unmounted = done.returncode == 0
        # When fusermount3 could not unmount (a caller still holds a file open:
        # EBUSY) or the mount never appeared, nothing will end the server but a
        # signal; SIGTERM lets libfuse end its loop and detach the mount lazily.
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is None and not unmounted:
                continue
            if sig is not None and proc.poll() is None:
                proc.send_signal(sig)  # by PID: the process we started, nothing else
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout_s if sig is None else timeout_s / 2)
            if proc.returncode is not None:
                break
        self.returncode = proc.returncode
        if is_mounted(self.mnt) and fusermount is not None:
            # Only after SIGKILL: nobody is left to answer, so detach lazily.
            subprocess.run([fusermount, "-u", "-z", str(self.mnt)], capture_output=True)
        with contextlib.suppress(OSError, ValueError):
            self.final_stats = self._read_stats()
        if proc.stdin is not None:
            proc.stdin.close()
        if self._log is not None:
            self._log.close()
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # stats -------------------------------------------------------------------
    def _read_stats(self) -> dict[str, Any]:
        with open(self.stats_file, encoding="utf-8") as fh:
            data: dict[str, Any] = json.load(fh)
        return data

    def stats(self, *, fresh: bool = True, timeout_s: float = 10.0) -> dict[str, Any]:
        """The server's counters (see ``docs/emulate-slowfs.md`` for the fields).

        With ``fresh``, waits for a snapshot written after this call began with
        no READ in flight, so it counts every read the caller has finished
        (and any readahead those reads started).
        """
        if self.returncode is not None and self.final_stats is not None:
            return self.final_stats
        since = time.time()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                data = self._read_stats()
            except (OSError, ValueError):
                data = None
            if data is not None and (
                not fresh or (data["written_at"] >= since and data["in_flight"] == 0)
            ):
                return data
            if not self.running:
                raise StorageError(
                    errno.EIO, f"SlowMount({self.mnt}): server is not running: {self.server_log()}"
                )
            if time.monotonic() > deadline:
                raise StorageError(
                    errno.ETIMEDOUT,
                    f"SlowMount({self.mnt}): no fresh stats in {self.stats_file} "
                    f"within {timeout_s:g} s",
                )
            time.sleep(_POLL_S)


def check_fuse(
    *,
    device: str = "/dev/fuse",
    fusermount: str = "fusermount3",
    module: str = "mfusepy",
    probe_mount: bool = True,
) -> tuple[bool, str]:
    """Whether a slowfs mount can work here, and if not, why (uncached)."""
    if not sys.platform.startswith("linux"):
        return False, f"slowfs needs Linux FUSE (this is {sys.platform})"
    if not os.path.exists(device):
        return False, f"{device} does not exist (no FUSE in this kernel or container)"
    try:
        os.close(os.open(device, os.O_RDWR | os.O_CLOEXEC))
    except OSError as exc:
        return False, f"cannot open {device}: {exc.strerror or exc}"
    if shutil.which(fusermount) is None:
        return False, f"{fusermount} is not on PATH (apt-get install fuse3)"
    if importlib.util.find_spec(module) is None:
        return False, f"Python module {module} is not installed (pip install mfusepy)"
    if not probe_mount:
        return True, "ok"
    with tempfile.TemporaryDirectory(prefix="headrace-fuse-probe-") as tmp:
        src = os.path.join(tmp, "src")
        os.mkdir(src)
        try:
            with SlowMount(src, os.path.join(tmp, "mnt"), mount_timeout_s=15.0):
                pass
        except (StorageError, ConfigError) as exc:
            return False, f"a trial FUSE mount failed: {exc}"
    return True, "ok"


@functools.cache
def fuse_available() -> tuple[bool, str]:
    """``(True, "ok")`` when slowfs can mount here, else ``(False, reason)``.

    Checks /dev/fuse, fusermount3 and mfusepy, then mounts and unmounts an
    empty directory once per process (about half a second) and caches the
    answer.
    """
    return check_fuse()
