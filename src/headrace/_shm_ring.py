"""Worker processes that write whole batches into shared-memory slots, read in step order.

Worker ``w`` of ``k`` runs an ordinary :class:`~headrace.pipeline.Loader`
over the steps ``t`` with ``(t - start) % k == w`` and copies each field
of each batch, contiguous, into the next free slot of a ring it created
once, in shared memory. Only ``(step, slot)`` crosses the pipe, as 13
bytes. The main process reads worker ``(t - start) % k`` for step ``t``, so
batches come out in global step order for any ``k``, and makes the fields
NumPy views of the slot: no pickling, no new segment and no file-descriptor
hand-over per batch, which is what makes a stock DataLoader worker queue
cost more than a whole token batch. (Copying ``x`` and ``y`` of a token
batch apart, 2 x 131 KB, measured cheaper than finding their common base
with :func:`~headrace._pack.pack`: a memcpy is 3 us, pack's Python 17 us.)
A batch whose fields differ in dtype or shape from the worker's first one
(or hold Python objects) is pickled through the pipe instead.

A slot is *leased* to the consumer: it goes back to its worker when the
last array or tensor viewing it is freed (a weak reference on the
memoryview that every view keeps alive), so a batch's tensors stay valid
for as long as anything holds them. A consumer that hoards batches would
starve its workers of slots; once half a worker's slots are out on lease,
further batches from it are handed out as copies and their slot is
returned at once. ``copy=True`` copies every batch.

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

import collections
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

from headrace.errors import ConfigError, HeadraceError
from headrace.pipeline import Batch, Loader, Source

__all__ = ["RingConfig", "WorkerBatches", "mp_context"]

_LAYOUT, _BATCH, _INLINE, _END, _ERROR = range(5)
_BATCH_MSG = struct.Struct("<Bqi")  # kind, step, slot
_SLOT_MSG = struct.Struct("<i")  # a slot returned to its worker
_ALIGN = 64  # each base starts on a cache line, and on any dtype's alignment
_STOP_S = 2.0  # how long close() waits for workers to exit on their own
# How long a worker whose lifeline broke may take to leave by itself (less than _STOP_S,
# so close() rarely has to terminate one).
_ORPHAN_GRACE_S = 1.0

# A batch's layout: per field, its name, dtype and shape.
Spec = tuple[tuple[str, str, tuple[int, ...]], ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class RingConfig:
    """What each worker needs (picklable, torch-free): the source and its loader options."""

    source: Source
    loader: dict[str, Any] = field(default_factory=dict)  # Loader keyword arguments
    start: int = 0  # the first global step; worker w owns (t - start) % workers == w
    workers: int = 1
    slots: int = 4  # ring slots per worker

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


def _offsets(spec: Spec) -> tuple[list[int], int]:
    """Byte offset of each field in a slot, and the slot's size (both ``_ALIGN``-ed)."""
    offsets, pos = [], 0
    for _, dtype, shape in spec:
        offsets.append(pos)
        pos += -(-_nbytes(dtype, shape) // _ALIGN) * _ALIGN
    return offsets, max(pos, _ALIGN)


def _spec(batch: Batch) -> Spec:
    return tuple((k, a.dtype.str, a.shape) for k, a in batch.items())


def _shareable(spec: Spec) -> bool:
    return not any(np.dtype(d).hasobject for _, d, _ in spec)


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

    def create(self, name: str, size: int) -> SharedMemory:
        with self.lock:
            self.shm = SharedMemory(name=name, create=True, size=size)
            return self.shm

    def unlink(self) -> None:
        with self.lock:
            self.unlink_held()

    def unlink_held(self) -> None:
        if self.shm is not None:
            shm, self.shm = self.shm, None
            shm.unlink()


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


def _worker(cfg: RingConfig, w: int, out: Connection, back: Connection, alive: Connection) -> None:
    """Produce this worker's steps into its ring until done, told to stop, or failed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process handles Ctrl-C
    named = _Named()
    _watch_lifeline(alive, named)
    k = cfg.workers
    offset = (cfg.start + w) % k
    step = cfg.start + (offset - cfg.start) % k  # the next step this worker owes
    shm: SharedMemory | None = None
    views: list[list[NDArray[Any]]] = []
    try:
        loader = Loader(cfg.source, **cfg.loader, step_stride=k, step_offset=offset)
        loader.step = cfg.start
        with loader:
            spec: Spec | None = None
            free: collections.deque[int] = collections.deque()
            for batch in loader:
                got = _spec(batch)
                if spec is None and _shareable(got):
                    spec = got
                    offsets, size = _offsets(spec)
                    name = f"headrace_{os.getpid()}_{secrets.token_hex(4)}"
                    shm = named.create(name, size * cfg.slots)
                    buf = shm.buf
                    assert buf is not None  # set by create=True
                    whole = np.frombuffer(buf, np.uint8)
                    views = [
                        [
                            whole[s * size + o : s * size + o + _nbytes(d, sh)].view(d).reshape(sh)
                            for (_, d, sh), o in zip(spec, offsets, strict=True)
                        ]
                        for s in range(cfg.slots)
                    ]
                    del whole, buf
                    out.send_bytes(bytes([_LAYOUT]) + pickle.dumps((name, size, spec)))
                    back.recv_bytes()  # mapped by the main process: the name can go now
                    named.unlink()
                    free.extend(range(cfg.slots))
                if got != spec:  # a batch of another shape: send it whole
                    out.send_bytes(bytes([_INLINE]) + pickle.dumps((step, batch), protocol=5))
                else:
                    while not free:  # every slot is queued or leased: wait for one back
                        free.append(_SLOT_MSG.unpack(back.recv_bytes())[0])
                    s = free.popleft()
                    _fill(views[s], batch)
                    out.send_bytes(_BATCH_MSG.pack(_BATCH, step, s))
                step += k
            out.send_bytes(bytes([_END]))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the main process closed our pipes: it wants no more
    except BaseException as exc:
        _send_error(out, step, exc)
    finally:
        views.clear()
        named.unlink()
        if shm is not None:
            shm.close()


def _fill(slot: list[NDArray[Any]], batch: Batch) -> None:
    # A function of its own, so no loop variable outlives it holding an export of
    # the segment (which would make ``SharedMemory.close`` fail).
    for dst, src in zip(slot, batch.values(), strict=True):
        np.copyto(dst, src, casting="no")


def _send_error(out: Connection, step: int, exc: BaseException) -> None:
    exc.add_note("worker traceback:\n" + "".join(traceback.format_exception(exc)).rstrip())
    try:
        payload = pickle.dumps((step, exc))
    except Exception:  # an exception that does not pickle: send its text
        text = "".join(traceback.format_exception(exc)).rstrip()
        payload = pickle.dumps((step, HeadraceError(f"{type(exc).__name__}: {exc}\n{text}")))
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
    fields: list[tuple[str, int, int, np.dtype[Any], tuple[int, ...]]]  # name, offset, ...
    free_cb: list[Callable[[Any], None]]  # per slot: the lease's weakref callback
    refs: list[weakref.ref[Any] | None]  # per slot: the live lease, if any
    lent: int = 0


class WorkerBatches:
    """Iterate packed batches from ``cfg.workers`` worker processes, in global step order.

    Each batch's arrays are C-contiguous and writeable: views of a leased
    shared-memory slot, or copies (``copy=True``, or a hoarding consumer). One iteration at a time:
    iterating again, or :meth:`close`, stops the previous workers.
    """

    def __init__(
        self, cfg: RingConfig, *, copy: bool = False, context: str | BaseContext | None = None
    ) -> None:
        self.cfg = cfg
        self.copy = copy
        self.ctx = mp_context(context)
        self._procs: list[BaseProcess] = []
        self._out: list[Connection] = []  # worker -> main: layout, (step, slot), end, error
        self._back: list[Connection] = []  # main -> worker: mapped, returned slots
        self._alive: Connection | None = None  # never written: its closing stops the workers
        self._rings: list[_Ring | None] = []
        self._pending: collections.deque[tuple[int, int]] = collections.deque()
        self.shm_names: list[str] = []  # for tests: the segments this iteration used

    def __iter__(self) -> Iterator[Batch]:
        self.close()
        self._start()
        return self._run()

    def _start(self) -> None:
        k = self.cfg.workers
        self._pending = collections.deque()
        self._rings = [None] * k
        self.shm_names = []
        try:
            pickle.dumps(self.cfg.source)
        except Exception as exc:
            raise ConfigError(
                f"the source {self.cfg.source!r} does not pickle ({type(exc).__name__}: {exc}); "
                "worker processes need a picklable source (or use num_workers=0)."
            ) from exc
        alive_r, self._alive = self.ctx.Pipe(duplex=False)
        try:
            for w in range(k):
                out_r, out_w = self.ctx.Pipe(duplex=False)
                back_r, back_w = self.ctx.Pipe(duplex=False)
                p = self.ctx.Process(  # type: ignore[attr-defined]
                    target=_worker,
                    args=(self.cfg, w, out_w, back_r, alive_r),
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
                msg = self._recv(w, t)
                kind = msg[0]
                if kind == _BATCH:
                    _, got, s = _BATCH_MSG.unpack(msg)
                    self._check_step(w, t, got)
                    yield self._lease(w, s)
                elif kind == _LAYOUT:
                    self._map(w, msg)
                    continue  # the batch follows
                elif kind == _INLINE:
                    got, batch = pickle.loads(msg[1:])
                    self._check_step(w, t, got)
                    # Unpickled arrays may be read-only: copy those, as promised.
                    yield {k: v if v.flags.writeable else v.copy() for k, v in batch.items()}
                elif kind == _END:
                    return
                else:  # _ERROR
                    got, exc = pickle.loads(msg[1:])
                    pid = self._procs[w].pid
                    exc.add_note(f"in headrace worker {w} of {k} (pid {pid}), at step {got}")
                    raise exc
                t += 1
        finally:
            self.close()

    def _recv(self, w: int, t: int) -> bytes:
        try:
            return self._out[w].recv_bytes()
        except EOFError:
            p = self._procs[w]
            p.join(timeout=1)
            raise HeadraceError(
                f"headrace worker {w} (pid {p.pid}) {_ended(p.exitcode, t)}"
            ) from None

    def _check_step(self, w: int, t: int, got: int) -> None:
        if got != t:
            raise HeadraceError(f"headrace worker {w} sent step {got}, expected step {t}")

    def _map(self, w: int, msg: bytes) -> None:
        name, size, spec = pickle.loads(msg[1:])
        self.shm_names.append(name)
        mem = memoryview(_attach(name, size * self.cfg.slots))
        self._back[w].send_bytes(b"m")
        offsets, _ = _offsets(spec)
        pending = self._pending

        def free_cb(s: int) -> Callable[[Any], None]:
            # Runs wherever the last view dies (any thread): only queue the slot.
            return lambda _ref: pending.append((w, s))

        self._rings[w] = _Ring(
            mem=mem,
            size=size,
            fields=[
                (k, o, _nbytes(d, sh), np.dtype(d), sh)
                for (k, d, sh), o in zip(spec, offsets, strict=True)
            ],
            free_cb=[free_cb(s) for s in range(self.cfg.slots)],
            refs=[None] * self.cfg.slots,
        )

    def _lease(self, w: int, s: int) -> Batch:
        ring = self._rings[w]
        assert ring is not None  # the layout comes before the first batch
        lo = s * ring.size
        whole = np.frombuffer(ring.mem[lo : lo + ring.size], np.uint8)
        if self.copy or 2 * ring.lent >= self.cfg.slots:
            out = {k: whole[o : o + n].view(d).reshape(sh).copy() for k, o, n, d, sh in ring.fields}
            self._pending.append((w, s))  # returned at the next step: the copies are made
            return out
        batch = {k: whole[o : o + n].view(d).reshape(sh) for k, o, n, d, sh in ring.fields}
        # Every view of the slot keeps ``whole.base`` (a memoryview) alive; its death
        # returns the slot.
        ring.refs[s] = weakref.ref(whole.base, ring.free_cb[s])
        ring.lent += 1
        return batch

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
        if self._alive is not None:  # first: a worker in a long read leaves after a grace
            self._alive.close()
            self._alive = None
        for c in (*self._out, *self._back):
            c.close()
        deadline = time.monotonic() + _STOP_S
        for p in self._procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in self._procs:
            if p.exitcode is None:
                p.terminate()
                p.join(timeout=1)
            if p.exitcode is None:
                p.kill()
                p.join()
            p.close()
        self._procs, self._out, self._back, self._rings = [], [], [], []


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
