"""Batches of positional reads through io_uring, in pure Python over ctypes.

The thread engine (``_batch.run_batch``) pays a GIL round trip and a thread
wake-up for every read; on a 2-vCPU machine, 32 4 KiB O_DIRECT reads in
flight kept 1.4-1.5 cores busy and fell well short of fio. Here one thread
fills a batch of submission queue entries (SQEs) with NumPy, submits each
wave with a few ``io_uring_enter`` calls (ctypes releases the GIL for each)
and reaps the completions (CQEs) with NumPy too: 1.3-1.6x the IOPS on a
third of the CPU (docs/io.md).

ABI notes (``include/uapi/linux/io_uring.h``, ``man 7 io_uring``):

* The SQ ring, CQ ring and SQE array are shared with the kernel by ``mmap``
  of the ring fd at fixed "offsets" that select the region; the *fields*
  inside the rings sit where ``io_uring_params.sq_off``/``cq_off`` say, never
  at hard-coded positions. With ``IORING_FEAT_SINGLE_MMAP`` both rings share
  one mapping.
* Head and tail are free-running u32 counters; ``counter & ring_mask`` is
  the slot. We own the SQ tail and CQ head; the kernel owns SQ head and CQ
  tail.
* Memory ordering: the protocol needs a store-release of the SQ tail after
  the SQEs, and a load-acquire of the CQ tail before the CQEs. Python cannot
  emit barriers, so only x86_64 is served: its total store order makes plain
  loads and stores enough (loads are not reordered with older loads, stores
  not with older stores). aarch64 has the same syscall numbers but a weak
  memory model, so it (like everything else) falls back to threads. The
  integer views of SQEs and CQEs below assume x86's little-endian layout too.
* Each read submitted produces exactly one CQE, and a ring starts with every
  counter at 0, so ``sq_tail - cq_head`` is always the number of reads not
  yet reaped. Draining after an interruption relies on that (see ``_drain``).
* The kernel DMAs into the caller's buffers until a read's CQE is posted:
  nothing here returns or raises while a read is in flight. If the ring
  itself fails with reads in flight, the buffers are kept alive forever
  (``_PARKED``) rather than freed under the device.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import mmap
import os
import platform
import sys
import threading
import time
from functools import cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["RING_ENTRIES", "Ring", "RingPool", "UringUnavailable", "ring_pool"]

_SYS_SETUP = {"x86_64": 425}
_SYS_ENTER = {"x86_64": 426}

IORING_OFF_SQ_RING = 0
IORING_OFF_CQ_RING = 0x8000000
IORING_OFF_SQES = 0x10000000
IORING_ENTER_GETEVENTS = 1
IORING_OP_READ = 22  # Linux 5.6
IORING_FEAT_SINGLE_MMAP = 1 << 0
IORING_FEAT_SUBMIT_STABLE = 1 << 2  # SQE data is consumed when io_uring_enter returns
IORING_FEAT_RW_CUR_POS = 1 << 3  # came with IORING_OP_READ (5.6): proves the opcode exists
_NEEDED = IORING_FEAT_SUBMIT_STABLE | IORING_FEAT_RW_CUR_POS

RING_ENTRIES = 256  # SQ size; the kernel makes the CQ twice as large
#: Completions of one read that may fail with EINTR or EAGAIN before it fails for good.
TRANSIENT_TRIES = 8
MAX_READ = 1 << 30  # SQE len is u32; the kernel stops a read near 2 GiB anyway
_U32 = 0xFFFFFFFF

# struct io_uring_sqe (64 bytes), every byte covered so a record copy writes
# all of them (a stale field from a previous read must never survive).
SQE = np.dtype(
    {
        "names": [
            "opcode", "flags", "ioprio", "fd", "off", "addr", "len", "rw_flags",
            "user_data", "buf_index", "personality", "file_index", "addr3", "pad",
        ],
        "formats": ["u1", "u1", "<u2", "<i4", "<u8", "<u8", "<u4", "<u4",
                    "<u8", "<u2", "<u2", "<u4", "<u8", "<u8"],
        "offsets": [0, 1, 2, 4, 8, 16, 24, 28, 32, 40, 42, 44, 48, 56],
        "itemsize": 64,
    }
)  # fmt: skip
# struct io_uring_cqe: u64 user_data, s32 res, u32 flags; 16 bytes without
# IORING_SETUP_CQE32, which we never set.
CQE_BYTES = 16


class _SqOffsets(ctypes.Structure):
    _fields_ = [
        ("head", ctypes.c_uint32),
        ("tail", ctypes.c_uint32),
        ("ring_mask", ctypes.c_uint32),
        ("ring_entries", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("dropped", ctypes.c_uint32),
        ("array", ctypes.c_uint32),
        ("resv1", ctypes.c_uint32),
        ("user_addr", ctypes.c_uint64),
    ]


class _CqOffsets(ctypes.Structure):
    _fields_ = [
        ("head", ctypes.c_uint32),
        ("tail", ctypes.c_uint32),
        ("ring_mask", ctypes.c_uint32),
        ("ring_entries", ctypes.c_uint32),
        ("overflow", ctypes.c_uint32),
        ("cqes", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("resv1", ctypes.c_uint32),
        ("user_addr", ctypes.c_uint64),
    ]


class _Params(ctypes.Structure):  # struct io_uring_params, 120 bytes
    _fields_ = [
        ("sq_entries", ctypes.c_uint32),
        ("cq_entries", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("sq_thread_cpu", ctypes.c_uint32),
        ("sq_thread_idle", ctypes.c_uint32),
        ("features", ctypes.c_uint32),
        ("wq_fd", ctypes.c_uint32),
        ("resv", ctypes.c_uint32 * 3),
        ("sq_off", _SqOffsets),
        ("cq_off", _CqOffsets),
    ]


class UringUnavailable(Exception):
    """io_uring cannot be used here; the message says why."""


@cache
def _syscall() -> Any:
    if sys.platform != "linux":
        raise UringUnavailable(f"io_uring is Linux-only (this is {sys.platform})")
    machine = platform.machine()
    if machine not in _SYS_SETUP:
        raise UringUnavailable(
            f"the io_uring engine serves x86_64 only (this is {machine}; see _uring.py on "
            "memory ordering)"
        )
    fn = ctypes.CDLL(None, use_errno=True).syscall
    fn.restype = ctypes.c_long
    return fn


def _sys_setup(entries: int, params: _Params) -> int:
    """``io_uring_setup(2)``: a new ring's fd, or ``OSError``."""
    fd = int(_syscall()(_SYS_SETUP[platform.machine()], entries, ctypes.byref(params)))
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return fd


def _sys_enter(fd: int, to_submit: int, min_complete: int, flags: int) -> int:
    """``io_uring_enter(2)`` without a signal mask: SQEs consumed, or ``OSError``."""
    fn = _syscall()
    n = int(fn(_SYS_ENTER[platform.machine()], fd, to_submit, min_complete, flags, None, 0))
    if n < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return n


# What a refusal of io_uring_setup says of the machine (a container's seccomp profile
# refuses it with EPERM, gVisor and kernels built without io_uring with ENOSYS).
_SETUP_REFUSED = {
    errno.EPERM: " (forbidden here: a seccomp profile, e.g. a container's default, or "
    "the sysctl kernel.io_uring_disabled)",
    errno.ENOSYS: " (this kernel or sandbox has no io_uring)",
    errno.ENOMEM: " (before Linux 5.12 a ring's memory counts against the locked-memory "
    "limit: raise ulimit -l)",
}
# A ring refused for want of file descriptors: perhaps for now, not for good.
_FOR_NOW = (errno.EMFILE, errno.ENFILE)

# Buffers of reads that a failed ring may still be filling: never freed.
_PARKED: list[object] = []


class Ring:
    """One io_uring instance: ``RING_ENTRIES`` submission slots, used by one thread at a time."""

    def __init__(self, entries: int = RING_ENTRIES) -> None:
        # No setup flags. SINGLE_ISSUER/DEFER_TASKRUN would tie a ring to the
        # thread that made it (pooled rings serve any thread); COOP_TASKRUN
        # measured no different here.
        p = _Params()
        try:
            fd = _sys_setup(entries, p)
        except OSError as exc:
            why = _SETUP_REFUSED.get(exc.errno or 0, "")
            raise UringUnavailable(f"io_uring_setup failed: {exc.strerror}{why}") from exc
        self.fd = fd
        self.broken = False
        self._maps: list[mmap.mmap] = []
        try:
            self._map(p)
        except BaseException as exc:
            self._unmap()
            os.close(fd)
            if isinstance(exc, OSError):  # mmap refused (e.g. ENOMEM): as good as no io_uring
                raise UringUnavailable(f"mapping the rings failed: {exc.strerror}") from exc
            raise
        self._pid = os.getpid()

    def _map(self, p: _Params) -> None:
        if p.features & _NEEDED != _NEEDED:
            raise UringUnavailable(
                f"the kernel's io_uring lacks IORING_OP_READ (features {p.features:#x}; "
                "Linux 5.6 or later needed)"
            )
        so, co = p.sq_off, p.cq_off
        sq_size = so.array + p.sq_entries * 4
        cq_size = co.cqes + p.cq_entries * CQE_BYTES
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        single = bool(p.features & IORING_FEAT_SINGLE_MMAP)
        size = max(sq_size, cq_size) if single else sq_size
        sq = mmap.mmap(self.fd, size, flags, prot, offset=IORING_OFF_SQ_RING)
        self._maps.append(sq)
        if single:
            cq = sq
        else:
            cq = mmap.mmap(self.fd, cq_size, flags, prot, offset=IORING_OFF_CQ_RING)
            self._maps.append(cq)
        sqes = mmap.mmap(self.fd, p.sq_entries * SQE.itemsize, flags, prot, offset=IORING_OFF_SQES)
        self._maps.append(sqes)
        # u32 views of each ring; every sq_off/cq_off field is a 4-byte-aligned u32.
        self._sq = np.frombuffer(sq, dtype=np.uint32, count=sq_size // 4)
        self._cq = np.frombuffer(cq, dtype=np.uint32, count=cq_size // 4)
        self._sq_head, self._sq_tail = so.head // 4, so.tail // 4
        self._cq_head, self._cq_tail = co.head // 4, co.tail // 4
        self.entries = int(self._sq[so.ring_entries // 4])
        self._sq_mask = int(self._sq[so.ring_mask // 4])
        self._cq_mask = int(self._cq[co.ring_mask // 4])
        self._cq_entries = int(self._cq[co.ring_entries // 4])
        # Plain integer views copy faster than structured records: an SQE is
        # 8 u64 words; a CQE is 4 i32 words (user_data low, high, res, flags).
        self._sqes = np.frombuffer(sqes, dtype=np.uint64, count=p.sq_entries * 8).reshape(-1, 8)
        self._cqes = np.frombuffer(cq, dtype=np.int32, count=p.cq_entries * 4, offset=co.cqes)
        self._cqes = self._cqes.reshape(-1, 4)
        # The SQ ring holds indices into the SQE array. Slot i always names
        # SQE i, so writing SQE (tail & mask) and bumping the tail submits it.
        a = so.array // 4
        self._sq[a : a + p.sq_entries] = np.arange(p.sq_entries, dtype=np.uint32)

    def _unmap(self) -> None:
        # Views export the maps' buffers; drop them or close() raises BufferError.
        for name in ("_sq", "_cq", "_sqes", "_cqes"):
            self.__dict__.pop(name, None)
        for m in self._maps:
            m.close()
        self._maps = []

    def close(self) -> None:
        if self.fd < 0:
            return
        self._unmap()
        os.close(self.fd)
        self.fd = -1

    # -- one batch -------------------------------------------------------------

    def read(
        self,
        fd: int,
        addr: NDArray[np.uint64],
        off: NDArray[np.int64],
        length: NDArray[np.int64],
        *,
        depth: int,
        align: int,
        owner: object,
    ) -> tuple[NDArray[np.int64], NDArray[np.int32]]:
        """Read ``length[i]`` bytes at ``off[i]`` of ``fd`` into memory at ``addr[i]``.

        At most ``depth`` reads are in flight. Returns ``(done, err)``:
        ``done[i]`` bytes arrived, from the start (``-1``: read ``i`` never
        started); ``err[i]`` is the errno of a failed read, else 0. A read
        ends short without an error at end of file (a 0-byte completion) or,
        when ``align > 1`` (O_DIRECT), where a completion leaves ``done[i]``
        unaligned, since O_DIRECT cannot resume there; other short reads are
        resubmitted for the rest, and so are reads that failed with EINTR or EAGAIN
        (``TRANSIENT_TRIES`` times at most). After a failure no new read starts; those
        started finish (short ones included). ``owner`` holds the memory the
        addresses point into: it is parked for good if the ring breaks with
        reads in flight.
        """
        n = len(off)
        done = np.full(n, -1, dtype=np.int64)
        err = np.zeros(n, dtype=np.int32)
        if n == 0:
            return done, err
        depth = max(1, min(depth, self.entries))
        # The first read of every piece, built once for the whole batch.
        first = np.zeros(n, dtype=SQE)
        first["opcode"] = IORING_OP_READ
        first["fd"] = fd
        first["off"] = off
        first["addr"] = addr
        first["len"] = np.minimum(length, MAX_READ)
        first["user_data"] = np.arange(n, dtype=np.uint64)  # < 2**31: the CQE's low i32
        first64 = first.view(np.uint64).reshape(n, 8)
        asked = first["len"].astype(np.int64)  # the length now in flight, per piece
        big = bool((length > MAX_READ).any())  # some piece needs more than one read
        align = max(1, align)
        again: list[int] = []  # pieces whose remainder waits to be resubmitted
        tries: NDArray[np.int32] | None = None  # transient failures per piece, once any
        nxt = 0  # next piece not yet started
        in_flight = 0
        stop = False
        try:
            while True:
                room = depth - in_flight
                if room:
                    # A started piece is finished even after a failure, as the
                    # thread engine's read loop does: its rest is not an EOF.
                    if again:
                        k = min(room, len(again))
                        ids, again = again[:k], again[k:]
                        rest = self._rest(fd, ids, off, addr, length, done, asked)
                        self._push(rest.view(np.uint64).reshape(k, 8))
                        in_flight += k
                        room -= k
                    k = 0 if stop else min(room, n - nxt)
                    if k:
                        done[nxt : nxt + k] = 0
                        self._push(first64[nxt : nxt + k])
                        nxt += k
                        in_flight += k
                if in_flight == 0:
                    break
                self._enter_wait()
                ud, res = self._reap()
                in_flight -= len(ud)
                if res.size and (res == asked[ud]).all():  # the common case: all whole
                    done[ud] += res
                    if not big:
                        continue
                    more = done[ud] < length[ud]
                else:
                    ok = res >= 0
                    done[ud[ok]] += res[ok]
                    # A signal or a kernel short of memory: read again (the thread
                    # engine's os.preadv retries EINTR itself), a few times at most.
                    retry = (res == -errno.EINTR) | (res == -errno.EAGAIN)
                    if retry.any():
                        if tries is None:
                            tries = np.zeros(n, dtype=np.int32)
                        tries[ud[retry]] += 1
                        retry &= tries[ud] <= TRANSIENT_TRIES
                        if (res[retry] == -errno.EAGAIN).any():
                            time.sleep(0.001 * int(tries[ud[retry]].max()))
                    failed = ~ok & ~retry
                    if failed.any():
                        err[ud[failed]] = -res[failed]
                        stop = True
                    d = done[ud]
                    # The rest of a short read is read again, unless it hit
                    # EOF (0 bytes) or left an O_DIRECT read unaligned.
                    more = retry | (ok & (res > 0) & (d < length[ud]) & (d % align == 0))
                again.extend(ud[more].tolist())
        except BaseException:
            self._drain(owner)
            raise
        return done, err

    def _rest(
        self,
        fd: int,
        ids: list[int],
        off: NDArray[np.int64],
        addr: NDArray[np.uint64],
        length: NDArray[np.int64],
        done: NDArray[np.int64],
        asked: NDArray[np.int64],
    ) -> NDArray[np.void]:
        """SQEs for the remainders of pieces ``ids``."""
        i = np.asarray(ids, dtype=np.int64)
        d = done[i]
        sqe = np.zeros(len(i), dtype=SQE)
        sqe["opcode"] = IORING_OP_READ
        sqe["fd"] = fd
        sqe["off"] = off[i] + d
        sqe["addr"] = addr[i] + d.astype(np.uint64)
        sqe["len"] = np.minimum(length[i] - d, MAX_READ)
        sqe["user_data"] = i.astype(np.uint64)
        asked[i] = sqe["len"]
        return sqe

    def _push(self, records: NDArray[np.uint64]) -> None:
        """Copy SQEs (rows of 8 u64 words) into free slots; publish them (tail last)."""
        tail = int(self._sq[self._sq_tail])
        k = len(records)
        s = tail & self._sq_mask
        head = min(k, self.entries - s)
        self._sqes[s : s + head] = records[:head]
        if head < k:
            self._sqes[: k - head] = records[head:]
        # x86_64: stores are not reordered with older stores, so the kernel
        # never sees this tail before the SQEs written above.
        self._sq[self._sq_tail] = (tail + k) & _U32

    def _unsubmitted(self) -> int:
        return (int(self._sq[self._sq_tail]) - int(self._sq[self._sq_head])) & _U32

    def _enter_wait(self) -> None:
        """Submit what the ring holds and wait for at least one completion.

        Submitted in doubling chunks (1, 2, 4, ...), the last one waiting,
        rather than in one call: the kernel prepares a whole call's reads
        before the device sees any, and a device that serves requests one at
        a time (this VM's virtio disk) idled meanwhile. Measured on the 4 GiB
        file at depth 32, host-cached blocks: +10% IOPS (56k -> 63k, 65k ->
        72k in two runs of 8 to 10 trials) for ~0.08 core.
        """
        k = 1
        while (left := self._unsubmitted()) > k:
            self._enter(k, 0)
            k *= 2
        self._enter(left, 1)

    def _enter(self, to_submit: int, wait: int) -> None:
        refused = 0
        while True:
            try:
                _sys_enter(self.fd, to_submit, wait, IORING_ENTER_GETEVENTS if wait else 0)
                return
            except OSError as exc:
                # EINTR: a signal; EAGAIN/EBUSY: the kernel is short of
                # request memory or wants completions reaped first. The SQEs
                # it did not take stay queued for the next call.
                if exc.errno == errno.EINTR:
                    continue
                if exc.errno in (errno.EAGAIN, errno.EBUSY):
                    if self._ready() or not wait:
                        return
                    # Nothing completed to reap: back off rather than spin a core
                    # (reads in flight still finish; the kernel frees memory meanwhile).
                    refused += 1
                    time.sleep(min(0.0001 * refused, 0.01))
                    continue
                self.broken = True
                raise

    def _ready(self) -> int:
        return (int(self._cq[self._cq_tail]) - int(self._cq[self._cq_head])) & _U32

    def _reap(self) -> tuple[NDArray[np.int32], NDArray[np.int32]]:
        """Take every posted CQE: ``(user_data, res)``, copied out of the ring."""
        head = int(self._cq[self._cq_head])
        n = (int(self._cq[self._cq_tail]) - head) & _U32
        s = head & self._cq_mask
        if s + n <= self._cq_entries:
            c = self._cqes[s : s + n].copy()
        else:
            c = np.concatenate([self._cqes[s:], self._cqes[: s + n - self._cq_entries]])
        # The CQEs are copied above, so the kernel may reuse their slots now.
        self._cq[self._cq_head] = (head + n) & _U32
        return c[:, 0], c[:, 2]

    def _pending(self) -> int:
        """Reads queued, in flight or completed but not reaped (see the module notes)."""
        return (int(self._sq[self._sq_tail]) - int(self._cq[self._cq_head])) & _U32

    def _drain(self, owner: object) -> None:
        """Wait until no read is pending, whatever interrupts us; park ``owner`` if we cannot."""
        interrupted: BaseException | None = None
        while not self.broken:
            try:
                if not self._pending():
                    break
                if not self._ready():
                    self._enter_wait()
                self._cq[self._cq_head] = self._cq[self._cq_tail]
            except OSError:
                break  # _enter_wait marked the ring broken
            except BaseException as exc:  # Ctrl-C again: the device is still writing
                interrupted = exc
        if self.broken and self._pending():
            _PARKED.append(owner)
        if interrupted is not None:
            raise interrupted


class RingPool:
    """Idle rings for any thread to borrow; one ring serves one batch at a time.

    A pool rather than one ring per thread: rings then number the batches
    running at once, not the threads that ever read, and live until
    :meth:`close` (at interpreter exit) instead of with some thread.
    """

    def __init__(self, keep: int = 8) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self._idle: list[Ring] = []
        self._pid = os.getpid()
        self.reason = ""  # why io_uring is unavailable; "" while it works or is untried
        self.failure = ""  # why the latest new ring failed (perhaps for now: EMFILE, ENOMEM)
        self._worked = False

    def acquire(self) -> Ring | None:
        """An idle or new ring, or ``None`` where io_uring does not work (see ``reason``)."""
        with self._lock:
            if self._pid != os.getpid():
                self._after_fork()
            if self._idle:
                return self._idle.pop()
            if self.reason:
                return None
        try:
            ring = Ring()
        except UringUnavailable as exc:
            cause = exc.__cause__
            for_now = isinstance(cause, OSError) and cause.errno in _FOR_NOW
            with self._lock:
                self.failure = str(exc)
                # It never worked: it never will, unless the process was out of fds.
                if not self._worked and not for_now:
                    self.reason = str(exc)
            return None
        self._worked = True
        return ring

    def release(self, ring: Ring) -> None:
        with self._lock:
            if not ring.broken and ring._pid == self._pid and len(self._idle) < self._keep:
                self._idle.append(ring)
                return
        if ring._pid == os.getpid():
            ring.close()

    def available(self) -> bool:
        ring = self.acquire()
        if ring is None:
            return False
        self.release(ring)
        return True

    def idle(self) -> int:
        return len(self._idle)

    def close(self) -> None:
        with self._lock:
            rings, self._idle = self._idle, []
        for r in rings:
            r.close()

    def _new_lock(self) -> None:
        # Run in a forked child: a parent thread may have held the lock at the
        # fork (inside acquire or release), and the child's copy would then
        # stay locked for good.
        self._lock = threading.Lock()

    def _after_fork(self) -> None:
        # The child inherited the parent's ring fds and maps: close its copies
        # (the parent's rings are untouched) and start afresh.
        for r in self._idle:
            r.close()
        self._idle = []
        self._pid = os.getpid()


_POOL = RingPool()
atexit.register(lambda: _POOL.close())
os.register_at_fork(after_in_child=lambda: _POOL._new_lock())


def ring_pool() -> RingPool:
    """The process-wide pool of rings."""
    return _POOL
