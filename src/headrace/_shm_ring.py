"""Worker processes that write whole chunks of batches into shared-memory slots.

Worker ``w`` of ``k`` runs an ordinary :class:`~headrace.pipeline.Loader`
over the steps ``t`` with ``(t - start) % k == w``, a chunk of steps at a
time (32 by default), and copies each chunk, once, into the next free slot of
a ring it created once, in shared memory. Only ``(first step, steps, slot)``
crosses the pipe, one message per chunk each way (the chunk's layout too,
pickled, when it differs from the last one's). The main process reads
worker ``(t - start) % k`` for step ``t``, so batches come out in global
step order for any ``k``, and makes the fields NumPy views of the slot: no
pickling, no new segment and no file-descriptor hand-over per batch, which
is what makes a stock DataLoader worker queue cost more than a whole token
batch. Fields that view one stretch of memory (``x`` and ``y`` of a token
batch, two views of one ``(B, L + 1)`` array) cross as that one stretch and
arrive as views of it, as they leave the loader without workers
(:func:`~headrace._pack.pack`); with ``contiguous=True`` each field is
copied apart, contiguous. A chunk whose fields hold Python objects, or that
does not fit a slot, is pickled through the pipe instead.

A slot is *leased* to the consumer: it goes back to its worker when the
last array or tensor viewing any batch of its chunk is freed (a weak
reference on the memoryview that every view keeps alive), so a batch's
tensors stay valid for as long as anything holds them. A consumer that
hoards batches would starve its workers of slots; once half a worker's
slots are out on lease, further chunks from it are handed out as copies and
their slot is returned at once. ``copy=True`` copies every chunk.

Segments: a worker creates its ring (``SharedMemory``, name
``headrace_<pid>_<hex>``), the main process maps it and acknowledges, and
the worker unlinks the name at once, so nothing is left in ``/dev/shm``
whoever dies later; the mapping lives while either side uses it.

Lifeline: each worker also holds the read end of a pipe that only the main
process can write to, and never does; a daemon thread in the worker waits
on it. When the main process closes the pipe, or dies in any way (SIGKILL
included: the kernel closes its end), the read returns EOF; a worker that
has not left by itself within ``_ORPHAN_GRACE_S`` (it notices at its next
pipe operation, but may be in the middle of a long read) unlinks a ring
still named and exits there and then. The pipe, not ``PR_SET_PDEATHSIG``:
under ``forkserver`` a worker's parent is the fork server, and the signal is
Linux-only.

Workers start with ``forkserver`` (default) or ``spawn``; ``fork`` is
refused, since the parent may run I/O pool threads. They ignore SIGINT: a
Ctrl-C reaches the main process, whose iterator stops them.

Nothing here imports torch: workers never load it.
"""

from __future__ import annotations

import atexit
import collections
import errno
import mmap
import multiprocessing as mp
import os
import pickle
import secrets
import signal
import struct
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._messages import byte_size
from headrace._pack import pack
from headrace.errors import ConfigError, HeadraceError
from headrace.pipeline import Batch, Loader, Source
from headrace.pipeline._layout import lay_out, ragged_keys

__all__ = ["RingConfig", "WorkerBatches", "mp_context"]

_LAYOUT, _CHUNK, _INLINE, _END, _ERROR = range(5)
_CHUNK_MSG = struct.Struct("<Bqii")  # kind, first step, steps, slot (+ a pickled layout)
_SLOT_MSG = struct.Struct("<i")  # a slot returned to its worker
_ALIGN = 64  # each region starts on a cache line, and on any dtype's alignment
_STOP_S = 2.0  # how long close() waits for workers to exit on their own
# How long a worker whose lifeline broke may take to leave by itself (less than _STOP_S,
# so close() rarely has to terminate one).
_ORPHAN_GRACE_S = 1.0

# Where a chunk lies in its slot: regions (byte offset, dtype, shape), each a
# contiguous copy of one array; and per field, (name, region, element offset,
# shape, element strides) into one of them.
Region = tuple[int, str, tuple[int, ...]]
FieldAt = tuple[str, int, int, tuple[int, ...], tuple[int, ...]]
Layout = tuple[tuple[Region, ...], tuple[FieldAt, ...]]


@dataclass(frozen=True, kw_only=True, slots=True)
class RingConfig:
    """What each worker needs (picklable, torch-free): the source and its loader options."""

    source: Source
    loader: dict[str, Any] = field(default_factory=dict)  # Loader keyword arguments
    start: int = 0  # the first global step; worker w owns (t - start) % workers == w
    workers: int = 1
    slots: int = 4  # ring slots per worker, each a whole chunk of batches
    contiguous: bool = False  # copy each field apart, C-contiguous

    def __post_init__(self) -> None:
        if self.workers < 1 or self.slots < 2 or self.start < 0:
            raise ConfigError(
                f"need workers >= 1, slots >= 2 and start >= 0 (got workers={self.workers}, "
                f"slots={self.slots}, start={self.start})."
            )


def mp_context(context: str | BaseContext | None) -> BaseContext:
    """A ``forkserver`` (default) or ``spawn`` context; ``fork`` is refused."""
    if os.name != "posix":
        raise ConfigError(
            "headrace worker processes need POSIX shared memory (Linux, macOS); use "
            "num_workers=0 here: the loader reads ahead on threads."
        )
    if context is None:
        context = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    if isinstance(context, str) and context not in mp.get_all_start_methods():
        raise ConfigError(
            f"multiprocessing_context={context!r} is not a start method here; use "
            "'forkserver' (the default) or 'spawn'."
        )
    ctx = mp.get_context(context) if isinstance(context, str) else context
    if ctx.get_start_method() == "fork":
        raise ConfigError(
            "multiprocessing_context='fork' is not allowed: the parent may run I/O pool "
            "threads, and forking a process with threads can deadlock the child; use "
            "'forkserver' (the default) or 'spawn'."
        )
    return ctx


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    return int(np.dtype(dtype).itemsize * np.prod(shape, dtype=np.int64))


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of this shape."""
    out, n = [], 1
    for dim in reversed(shape):
        out.append(n)
        n *= dim
    return tuple(reversed(out))


def _layout(arrays: Batch, contiguous: bool) -> tuple[list[NDArray[Any]], Layout] | None:
    """The arrays to copy into a slot and where each field then lies (``None``: objects).

    Shared (the default): :func:`~headrace._pack.pack`'s bases, so ``x`` and
    ``y`` cross as their one ``(B, L + 1)`` stretch. ``contiguous``: each
    field is copied apart, C-contiguous.
    """
    if any(a.dtype.hasobject for a in arrays.values()):
        return None
    fields: tuple[FieldAt, ...]
    if contiguous:
        srcs = list(arrays.values())
        fields = tuple(
            (name, i, 0, a.shape, _c_strides(a.shape)) for i, (name, a) in enumerate(arrays.items())
        )
    else:
        srcs, packed = pack(arrays)
        fields = tuple((name, *packed[name]) for name in arrays)
    regions, pos = [], 0
    for a in srcs:
        regions.append((pos, a.dtype.str, a.shape))
        pos += _aligned(a.nbytes)
    return srcs, (tuple(regions), fields)


def _size(regions: tuple[Region, ...]) -> int:
    """Bytes a chunk of this layout takes in a slot."""
    return sum(_aligned(_nbytes(d, sh)) for _, d, sh in regions)


# -- the worker ------------------------------------------------------------------------


class _Named:
    """The worker's ring while its name is still in ``/dev/shm``.

    Unlinked by whichever thread comes first: the worker's own (once the main
    process has mapped the ring, or on its way out) or the lifeline's.
    """

    __slots__ = ("lock", "shm")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.shm: SharedMemory | None = None

    def create(self, name: str, size: int, slots: int) -> SharedMemory:
        with self.lock:
            self.shm = SharedMemory(name=name, create=True, size=size * slots)
            _reserve(self.shm, size, slots)
            return self.shm

    def unlink(self) -> None:
        with self.lock:
            self.unlink_held()

    def unlink_held(self) -> None:
        if self.shm is not None:
            shm, self.shm = self.shm, None
            shm.unlink()


def _reserve(shm: SharedMemory, size: int, slots: int) -> None:
    """Take the ring's pages now. A tmpfs gives a page at its first write, and one past
    its size (a container's /dev/shm is 64 MB unless told otherwise) is a SIGBUS that
    kills the worker in the middle of a copy, saying nothing of why."""
    fd = getattr(shm, "_fd", -1)
    if fd < 0 or not hasattr(os, "posix_fallocate"):
        return  # not Linux: pages are taken as they are written
    try:
        os.posix_fallocate(fd, 0, size * slots)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            return  # a file system that does not preallocate: as without
        st = os.statvfs("/dev/shm")
        raise HeadraceError(
            f"a ring of {slots} slots of {byte_size(size)} does not fit in /dev/shm "
            f"({byte_size(st.f_bavail * st.f_frsize)} free): give the container more "
            "shared memory (docker run --shm-size=1g; Kubernetes: an emptyDir of medium "
            "Memory mounted on /dev/shm), or use fewer workers, a smaller "
            "prefetch_factor or chunk_steps, or num_workers=0"
        ) from exc


def _watch_lifeline(alive: Connection, named: _Named) -> None:
    """From a daemon thread: leave once the main process has closed ``alive`` or died."""

    def watch() -> None:
        try:
            alive.recv_bytes()  # nothing is ever sent: this returns by EOF only
        except (EOFError, OSError):
            pass
        time.sleep(_ORPHAN_GRACE_S)  # the worker's next send or receive ends it cleanly
        # Held to the end, so no ring is created (and left named) between here and exit.
        named.lock.acquire()
        try:
            named.unlink_held()
        finally:
            os._exit(0)

    threading.Thread(target=watch, name="headrace-lifeline", daemon=True).start()


def _worker(config: bytes, w: int, out: Connection, back: Connection, alive: Connection) -> None:
    """Produce this worker's steps into its ring until done, told to stop, or failed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process handles Ctrl-C
    named = _Named()
    _watch_lifeline(alive, named)
    step = -1  # the next step this worker owes, once its config is read
    shm: SharedMemory | None = None
    whole: NDArray[np.uint8] | None = None
    try:
        cfg: RingConfig = pickle.loads(config)  # the source reopens its files here
        k = cfg.workers
        offset = (cfg.start + w) % k
        step = cfg.start + (offset - cfg.start) % k
        loader = Loader(cfg.source, **cfg.loader, step_stride=k, step_offset=offset)
        loader.step = cfg.start
        with loader:
            size = 0  # bytes per slot
            free: collections.deque[int] = collections.deque()
            sent: Layout | None = None
            for steps, arrays in loader.chunks():
                laid = _layout(arrays, cfg.contiguous)
                if whole is None and laid is not None:
                    # Sized for the largest chunk the loader will read, from this first one.
                    regions = laid[1][0]
                    size = _size(regions) * -(-loader.max_chunk_steps // len(steps))
                    size += _ALIGN * len(regions)
                    name = f"headrace_{os.getpid()}_{secrets.token_hex(4)}"
                    shm = named.create(name, size, cfg.slots)
                    assert shm.buf is not None  # set by create=True
                    whole = np.frombuffer(shm.buf, np.uint8)
                    out.send_bytes(bytes([_LAYOUT]) + pickle.dumps((name, size)))
                    back.recv_bytes()  # mapped by the main process: the name can go now
                    named.unlink()
                    free.extend(range(cfg.slots))
                if whole is None or laid is None or _size(laid[1][0]) > size:
                    out.send_bytes(bytes([_INLINE]) + pickle.dumps((steps, arrays), protocol=5))
                else:
                    while not free:  # every slot is queued or leased: wait for one back
                        free.append(_SLOT_MSG.unpack(back.recv_bytes())[0])
                    slot = free.popleft()
                    srcs, layout = laid
                    _fill(whole[slot * size : (slot + 1) * size], srcs, layout[0])
                    head = _CHUNK_MSG.pack(_CHUNK, steps[0], len(steps), slot)
                    out.send_bytes(head if layout == sent else head + pickle.dumps(layout))
                    sent = layout
                step = steps[-1] + k
            out.send_bytes(bytes([_END]))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the main process closed our pipes: it wants no more
    except BaseException as exc:
        _send_error(out, step, exc)
    finally:
        whole = None  # the segment's last export here, so it can close
        named.unlink()
        if shm is not None:
            shm.close()


def _fill(slot: NDArray[np.uint8], srcs: list[NDArray[Any]], regions: tuple[Region, ...]) -> None:
    # A function of its own, so no loop variable outlives it holding an export of
    # the segment (which would make ``SharedMemory.close`` fail).
    for a, (at, dtype, shape) in zip(srcs, regions, strict=True):
        np.copyto(slot[at : at + a.nbytes].view(dtype).reshape(shape), a, casting="no")


def _unpicklable(cfg: RingConfig) -> str:
    """What part of a worker's config does not pickle: the source, or a loader option
    (a transform, most often a lambda)."""
    for key, value in cfg.loader.items():
        try:
            pickle.dumps(value)
        except Exception:
            return f"the loader's {key} {value!r}"
    return f"the source {cfg.source!r}"


def _send_error(out: Connection, step: int, exc: BaseException) -> None:
    where = "worker traceback:\n" + "".join(traceback.format_exception(exc)).rstrip()
    exc.add_note(where)
    try:
        payload = pickle.dumps((step, exc))
        # An exception whose __init__ takes other arguments than its message pickles,
        # but fails to unpickle (a TypeError about __init__ would reach the consumer).
        pickle.loads(payload)
    except Exception:  # an exception that does not pickle: its type, message, traceback
        text = HeadraceError(f"{type(exc).__name__}: {exc}")
        text.add_note(where)  # once (formatting exc again would repeat its notes)
        payload = pickle.dumps((step, text))
    try:
        out.send_bytes(bytes([_ERROR]) + payload)
    except OSError:
        pass  # the main process is gone


# -- the main process -------------------------------------------------------------------


@dataclass(slots=True)
class _Ring:
    """The main process's view of one worker's slots."""

    mem: memoryview
    size: int  # bytes per slot
    free_cb: list[Callable[[Any], None]]  # per slot: the lease's weakref callback
    refs: list[weakref.ref[Any] | None]  # per slot: the live lease, if any
    layout: Layout | None = None  # the last chunk's
    lent: int = 0


class WorkerBatches:
    """Iterate batches from ``cfg.workers`` worker processes, in global step order.

    Each batch's arrays are writeable views of a leased shared-memory slot, or
    copies (``copy=True``, or a hoarding consumer); fields are laid out as
    the loader makes them (``x``/``y`` views of one array), or each
    C-contiguous with ``cfg.contiguous``. One iteration at a time: iterating
    again, or :meth:`close`, stops the previous workers.
    """

    def __init__(
        self, cfg: RingConfig, *, copy: bool = False, context: str | BaseContext | None = None
    ) -> None:
        self.cfg = cfg
        self.copy = copy
        self.ctx = mp_context(context)
        self._procs: list[BaseProcess] = []
        self._out: list[Connection] = []  # worker -> main: layout, chunk, end, error
        self._back: list[Connection] = []  # main -> worker: mapped, returned slots
        self._alive: Connection | None = None  # never written: its closing stops the workers
        self._rings: list[_Ring | None] = []
        self._heard: list[bool] = []  # per worker: has it sent anything yet
        # Per worker: its last chunk's batches the consumer has not had yet.
        self._ready: list[collections.deque[Batch]] = []
        self._pending: collections.deque[tuple[int, int]] = collections.deque()
        self.shm_names: list[str] = []  # for tests: the segments this iteration used
        self.pickled_chunks = 0  # chunks that came through the pipe, not a slot
        self._closing = threading.RLock()
        _LIVE.add(self)

    def __iter__(self) -> Iterator[Batch]:
        self.close()
        self._start()
        return self._run()

    def _start(self) -> None:
        k = self.cfg.workers
        self._pending = collections.deque()
        self._rings = [None] * k
        self._heard = [False] * k
        self._ready = [collections.deque() for _ in range(k)]
        self.shm_names = []
        self.pickled_chunks = 0
        try:  # pickled once here, for every worker, so a source that cannot is named now
            config = pickle.dumps(self.cfg)
        except Exception as exc:
            raise ConfigError(
                f"{_unpicklable(self.cfg)} does not pickle ({type(exc).__name__}: {exc}); "
                "worker processes need it picklable (a module-level function or class, not a "
                "lambda or a local function), or use num_workers=0."
            ) from exc
        alive_r, self._alive = self.ctx.Pipe(duplex=False)
        try:
            for w in range(k):
                out_r, out_w = self.ctx.Pipe(duplex=False)
                back_r, back_w = self.ctx.Pipe(duplex=False)
                p = self.ctx.Process(  # type: ignore[attr-defined]
                    target=_worker,
                    args=(config, w, out_w, back_r, alive_r),
                    name=f"headrace-worker-{w}",
                    daemon=True,
                )
                try:
                    p.start()
                except BaseException:
                    for c in (out_r, out_w, back_r, back_w):
                        c.close()
                    self.close()  # the workers already started
                    raise
                self._procs.append(p)
                self._out.append(out_r)
                self._back.append(back_w)
                # Our copies of the worker's ends go, so a dead worker reads as EOF here.
                out_w.close()
                back_r.close()
        finally:
            alive_r.close()  # likewise: only the workers hold the lifeline's read end

    def _run(self) -> Iterator[Batch]:
        k, t = self.cfg.workers, self.cfg.start
        try:
            while True:
                if self._pending:
                    self._return_slots()
                w = (t - self.cfg.start) % k
                ready = self._ready[w]
                if not ready and not self._receive(w, t, ready):
                    return
                # Handed over, not kept in this frame: a suspended iterator holds no batch.
                yield ready.popleft()
                t += 1
        finally:
            self.close()

    def _receive(self, w: int, t: int, ready: collections.deque[Batch]) -> bool:
        """Worker ``w``'s next chunk, from step ``t``, into ``ready``; ``False`` at its end."""
        while True:
            msg = self._recv(w, t)
            kind = msg[0]
            if kind == _CHUNK:
                _, first, n, s = _CHUNK_MSG.unpack_from(msg)
                self._check_step(w, t, first)
                ring = self._rings[w]
                assert ring is not None  # the ring is mapped before the first chunk
                if len(msg) > _CHUNK_MSG.size:
                    ring.layout = pickle.loads(msg[_CHUNK_MSG.size :])
                _split(self._lease(w, ring, s), n, ready)
                return True
            if kind == _LAYOUT:
                self._map(w, msg)
            elif kind == _INLINE:
                self.pickled_chunks += 1
                steps, arrays = pickle.loads(msg[1:])
                self._check_step(w, t, steps[0])
                # Unpickled arrays may be read-only: copy those, as promised.
                arrays = {k: v if v.flags.writeable else v.copy() for k, v in arrays.items()}
                _split(arrays, len(steps), ready)
                return True
            elif kind == _END:
                return False
            else:  # _ERROR
                got, exc = pickle.loads(msg[1:])
                pid = self._procs[w].pid
                at = f"at step {got}" if got >= 0 else "while unpickling its source"
                exc.add_note(f"in headrace worker {w} of {self.cfg.workers} (pid {pid}), {at}")
                raise exc

    def _recv(self, w: int, t: int) -> bytes:
        try:
            msg = self._out[w].recv_bytes()
        except EOFError:
            p = self._procs[w]
            p.join(timeout=1)
            text = f"headrace worker {w} (pid {p.pid}) {_ended(p.exitcode, t)}"
            if p.exitcode is not None and p.exitcode > 0 and not self._heard[w]:
                text += _NEVER_STARTED
            raise HeadraceError(text) from None
        self._heard[w] = True
        return msg

    def _check_step(self, w: int, t: int, got: int) -> None:
        if got != t:
            raise HeadraceError(f"headrace worker {w} sent step {got}, expected step {t}")

    def _map(self, w: int, msg: bytes) -> None:
        name, size = pickle.loads(msg[1:])
        self.shm_names.append(name)
        mem = memoryview(_attach(name, size * self.cfg.slots))
        self._back[w].send_bytes(b"m")
        pending = self._pending

        def free_cb(s: int) -> Callable[[Any], None]:
            # Runs wherever the last view dies (any thread): only queue the slot.
            return lambda _ref: pending.append((w, s))

        self._rings[w] = _Ring(
            mem=mem,
            size=size,
            free_cb=[free_cb(s) for s in range(self.cfg.slots)],
            refs=[None] * self.cfg.slots,
        )

    def _lease(self, w: int, ring: _Ring, s: int) -> Batch:
        """The chunk in slot ``s``: views of it (leased), or copies (the slot returns now)."""
        assert ring.layout is not None  # sent with the first chunk
        regions, fields = ring.layout
        lo = s * ring.size
        whole = np.frombuffer(ring.mem[lo : lo + ring.size], np.uint8)
        copy = self.copy or 2 * ring.lent >= self.cfg.slots
        bases = []
        for at, dtype, shape in regions:
            r = whole[at : at + _nbytes(dtype, shape)].view(dtype).reshape(-1)
            bases.append(r.copy() if copy else r)
        out: Batch = {}
        for name, i, off, shape, strides in fields:
            b = bases[i]
            isz = b.itemsize
            out[name] = np.ndarray(
                shape, b.dtype, buffer=b, offset=off * isz, strides=tuple(x * isz for x in strides)
            )
        if copy:
            self._pending.append((w, s))  # returned at the next step: the copies are made
        else:
            # Every view of the slot keeps ``whole.base`` (a memoryview) alive; its death
            # returns the slot.
            ring.refs[s] = weakref.ref(whole.base, ring.free_cb[s])
            ring.lent += 1
        return out

    def _return_slots(self) -> None:
        pending, rings, back = self._pending, self._rings, self._back
        while pending:
            w, s = pending.popleft()
            ring = rings[w]
            if ring is not None and ring.refs[s] is not None:  # a lease ended (not a copy)
                ring.refs[s] = None
                ring.lent -= 1
            try:
                back[w].send_bytes(_SLOT_MSG.pack(s))
            except OSError:
                pass  # a worker that has finished its steps has closed its end

    def close(self) -> None:
        """Stop the workers (promptly: they exit at their next send) and drop the rings.

        Leased batches stay valid: their mapping lives until the last view dies.
        """
        # One at a time: a watchdog thread's close() and the iterator's own (its finally)
        # may come together; the second waits for the workers to be stopped, then finds
        # nothing left (reentrant: a finaliser may run inside close() in this thread).
        with self._closing:
            for ready in self._ready:  # batches not handed out: their slots may go
                ready.clear()
            alive, procs, conns = self._alive, self._procs, (*self._out, *self._back)
            if alive is None and not procs:
                return  # closed already (perhaps at exit, before this iterator's finaliser)
            # Unlisted first: a close() reentering from a finaliser has nothing to do.
            self._alive, self._procs, self._out, self._back, self._rings = None, [], [], [], []
            if alive is not None:  # first: a worker in a long read leaves after a grace
                alive.close()
            for c in conns:
                c.close()
            deadline = _monotonic() + _STOP_S
            try:
                for p in procs:
                    p.join(timeout=max(0.0, deadline - _monotonic()))
            finally:
                # Also when a Ctrl-C cuts the wait short (the iteration ended and closed
                # just as it came): no worker outlives close().
                for p in procs:
                    if p.exitcode is None:
                        p.terminate()
                        p.join(timeout=1)
                    if p.exitcode is None:
                        p.kill()
                        p.join()
                    p.close()


# Bound here: an iterator still held when the interpreter ends is finalised after the
# modules are torn down, when ``time`` may already be None.
_monotonic = time.monotonic

#: Iterations whose workers may still run: stopped at exit, before multiprocessing's
#: own exit handler (registered earlier, so run later) SIGTERMs daemon processes. A
#: worker ended that way cannot unlink a ring it has not handed over yet, and the
#: resource tracker warned of a "leaked shared_memory object" at every such exit.
_LIVE: weakref.WeakSet[WorkerBatches] = weakref.WeakSet()


@atexit.register
def _close_live() -> None:
    for batches in list(_LIVE):
        batches.close()


def _split(arrays: Batch, n: int, ready: collections.deque[Batch]) -> None:
    """A chunk's ``n`` batches, back to back in ``arrays``, one by one into ``ready``
    (each laid out as its own samples decide: :func:`~headrace.pipeline._loader.lay_out`)."""
    per = {k: len(v) // n for k, v in arrays.items()}
    ragged = ragged_keys(arrays)
    for i in range(n):
        batch = {k: v[i * per[k] : (i + 1) * per[k]] for k, v in arrays.items()}
        ready.append(lay_out(batch, ragged) if ragged else batch)


# A worker that exits with an error before its first message never ran ``_worker``
# (whose errors come back as messages): it failed while starting, in
# multiprocessing's bootstrap, which re-imports the main module.
_NEVER_STARTED = (
    " It ended while starting, before headrace's worker code ran: its traceback is on "
    "stderr above. Worker processes start with forkserver or spawn and import the main "
    'module, so a script must start iterating under `if __name__ == "__main__":`.'
)


def _ended(exitcode: int | None, step: int) -> str:
    """How a worker ended, from its exit code (negative: the signal that killed it)."""
    if exitcode is None:
        return f"closed its pipe before sending step {step}, and had not exited 1 s later."
    if exitcode >= 0:
        return f"exited with code {exitcode} before sending step {step}; it crashed or was ended."
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = "unknown"
    text = f"was killed by signal {-exitcode} ({name}) before sending step {step}"
    if -exitcode == signal.SIGKILL:
        return text + "; out of memory? (the kernel's OOM killer sends SIGKILL)"
    return text + "."


def _attach(name: str, size: int) -> mmap.mmap:
    """Map a worker's segment by name (``SharedMemory`` would register it with the
    resource tracker a second time on Python < 3.13, and refuse to close while views live).
    """
    import _posixshmem  # type: ignore[import-not-found]  # the module SharedMemory itself uses on POSIX

    fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)
