"""Batches from worker processes through shared-memory slots: the main process's side.

The main process starts ``k`` workers (:mod:`headrace._ring_worker`; with
``forkserver``, the default, or ``spawn``: ``fork`` is refused, since the
parent may run I/O pool threads), reads worker ``(t - start) % k`` for step
``t``, so batches come out in global step order for any ``k``, and makes the
fields NumPy views of the slot (:mod:`headrace._ring_layout`; samples of several
shapes an ``object`` array of views, one a sample): no pickling, no
new segment and no file-descriptor hand-over per batch, which is what makes a
stock DataLoader worker queue cost more than a whole token batch. A slot is
*leased* to the consumer until the last view of any batch of its chunk is
freed (:meth:`WorkerBatches._lease`). Nothing here imports torch: workers
never load it.
"""

from __future__ import annotations

import ast
import atexit
import collections
import mmap
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._ring_layout import (
    _CHUNK,
    _CHUNK_MSG,
    _END,
    _ERROR,
    _INLINE,
    _LAYOUT,
    _NOTES,
    _RUN,
    _SLOT_MSG,
    _STARTED,
    _STARTED_MSG,
    Doing,
    FieldAt,
    Layout,
    RingConfig,
    _nbytes,
)
from headrace._ring_worker import _worker, no_shm
from headrace.errors import ConfigError, HeadraceError, StateError
from headrace.formats._file_source import merge_corrupt_news
from headrace.pipeline import Batch
from headrace.pipeline._layout import lay_out, narrow_strings, ragged_keys, string_keys
from headrace.pipeline._stall import DEFAULT_STALL_WARN_S, StallWatch, worker_stall_message

__all__ = ["RingConfig", "WorkerBatches", "mp_context"]

_STOP_S = 2.0  # how long close() waits for workers to exit on their own


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


def _unpicklable(cfg: RingConfig) -> str:
    """What part of a worker's config does not pickle: the source, or a loader option
    (a transform, most often a lambda)."""
    for key, value in cfg.loader.items():
        try:
            pickle.dumps(value)
        except Exception:
            return f"the loader's {key} {value!r}"
    return f"the source {cfg.source!r}"


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

    ``persistent=True``: an iteration that finishes or is abandoned (its
    iterator closed) leaves the workers waiting, and iterating again with a
    ``cfg`` that differs only in start and origin tells them the new start
    (:meth:`_resume`) instead of starting new processes. An iteration that
    fails stops them.
    """

    def __init__(
        self,
        cfg: RingConfig,
        *,
        copy: bool = False,
        context: str | BaseContext | None = None,
        persistent: bool = False,
    ) -> None:
        self.cfg = cfg
        self.copy = copy
        self.persistent = persistent
        self.ctx = mp_context(context)
        self._procs: list[BaseProcess] = []
        self._doing: list[Doing] = []  # per worker: what it runs (a stall warning names it)
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
        self._run_id = 0  # the current iteration's: older iterators are stale
        self._started: RingConfig | None = None  # the config the running workers began with
        self._forked = 0  # the last run whose workers a fork left to the parent process
        _LIVE.add(self)

    def __iter__(self) -> Iterator[Batch]:
        self._run_id += 1
        run = self._run_id
        if not self._resume():
            if run != self._run_id:  # a close() from another thread (a watchdog) came
                raise StateError("this iteration was closed while its workers started over")
            self.close()
            self._start()
        return self._run(self._run_id)

    def _resume(self) -> bool:
        """Persistent workers: each starts over at ``cfg.start``; ``False`` where they
        cannot (none running, a config that differs in more than start and origin, a
        worker dead, failed, or not done with its chunk in hand within ``_STOP_S``), to
        start new ones instead.

        What a worker sent before its ``_STARTED`` belongs to the iteration before: its
        slots go back unread, so nothing of that iteration reaches this one."""
        old, new = self._started, self.cfg
        if not self.persistent or not self._procs or old is None or not _same_but_start(old, new):
            return False
        for ready in self._ready:  # batches not handed out: their slots go back
            ready.clear()
        run = pickle.dumps((self._run_id, new.start, new.origin))
        deadline = _monotonic() + _STOP_S
        try:
            self._return_slots()
            for back in self._back:
                back.send_bytes(_RUN + run)
            for w in range(new.workers):
                if not self._drain(w, deadline):
                    return False
        except (OSError, EOFError):
            return False  # a worker that died meanwhile: new ones start
        except BaseException:
            self.close()
            raise
        return True

    def _drain(self, w: int, deadline: float) -> bool:
        """Read worker ``w``'s messages up to its ``_STARTED`` for this run, returning the
        slots of the chunks among them; ``False`` if it failed or is still reading."""
        out = self._out[w]
        while out.poll(max(0.0, deadline - _monotonic())):
            msg = out.recv_bytes()
            kind = msg[0]
            if kind == _STARTED:
                if _STARTED_MSG.unpack(msg)[1] == self._run_id:
                    return True
            elif kind == _LAYOUT:
                self._map(w, msg)
            elif kind == _CHUNK:
                s = _CHUNK_MSG.unpack_from(msg)[3]
                ring = self._rings[w]
                assert ring is not None  # the ring is mapped before the first chunk
                if len(msg) > _CHUNK_MSG.size:  # the worker counts it as sent
                    ring.layout = pickle.loads(msg[_CHUNK_MSG.size :])
                self._back[w].send_bytes(_SLOT_MSG.pack(s))
            elif kind == _NOTES:  # (met for a chunk not consumed: replaced all the same)
                merge_corrupt_news(pickle.loads(msg[1:]))
            elif kind == _ERROR:  # (a read ahead of what was consumed)
                return False
        return False

    def _start(self) -> None:
        unguarded = _unguarded_main()
        if unguarded is not None:
            raise ConfigError(unguarded)
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
                try:
                    doing = Doing(self.ctx)
                except PermissionError as exc:  # no writable /dev/shm: a bare PermissionError
                    for c in (out_r, out_w, back_r, back_w):
                        c.close()
                    self.close()  # the workers already started
                    raise HeadraceError(no_shm(exc)) from exc
                p = self.ctx.Process(  # type: ignore[attr-defined]
                    target=_worker,
                    args=(config, w, out_w, back_r, alive_r, doing),
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
                self._doing.append(doing)
                self._out.append(out_r)
                self._back.append(back_w)
                # Our copies of the worker's ends go, so a dead worker reads as EOF here.
                out_w.close()
                back_r.close()
        finally:
            alive_r.close()  # likewise: only the workers hold the lifeline's read end
        self._started = self.cfg

    def _run(self, run: int) -> Iterator[Batch]:
        k, t = self.cfg.workers, self.cfg.start
        kept = False  # persistent workers stay for the next iteration
        try:
            while True:
                if run <= self._forked:
                    raise StateError(
                        "this iteration's workers belong to the process this one was "
                        "forked from, which reads their batches: iterate again here (iter()) "
                        "for workers of this process's own"
                    )
                if run != self._run_id:
                    raise StateError("this iteration is stale: a newer one has begun")
                if self._pending:
                    self._return_slots()
                w = (t - self.cfg.start) % k
                ready = self._ready[w]
                try:
                    if not ready and not self._receive(w, t, ready):
                        kept = self.persistent
                        return
                except Exception as exc:
                    if run == self._run_id:
                        raise
                    # A close() from another thread (a watchdog) ended the workers and
                    # pipes it waited on, whose own errors would mislead.
                    raise StateError(
                        f"this iteration was closed while it waited for worker {w} (a "
                        "close() or a newer iteration from another thread)"
                    ) from exc
                # Handed over, not kept in this frame: a suspended iterator holds no batch.
                try:
                    yield ready.popleft()
                except GeneratorExit:  # abandoned between batches: no message half read
                    kept = self.persistent
                    raise
                t += 1
        finally:
            if not kept and run == self._run_id:
                self.close()

    def _receive(self, w: int, t: int, ready: collections.deque[Batch]) -> bool:
        """Worker ``w``'s next chunk, from step ``t``, into ``ready``; ``False`` at its end.
        A wait past the loader's ``stall_warn_s`` warns here, in the main process, where
        the training loop waits (:meth:`_stall_watch`); the line that the batch came is
        said once its chunk is in ``ready``."""
        watch = self._stall_watch(w, t)
        watch.begin()
        arrived = False
        try:
            arrived = self._receive_watched(w, t, ready, watch)
        finally:
            watch.end(arrived=arrived)
        return arrived

    def _stall_watch(self, w: int, t: int) -> StallWatch:
        """Warns while the consumer waits for step ``t`` from worker ``w``: the worker's
        reads are not this process's, so it names the worker, whose own loader warns
        on stderr naming them (the same ``stall_warn_s``)."""
        after = self.cfg.loader.get("stall_warn_s", DEFAULT_STALL_WARN_S)
        k, pid, doing = self.cfg.workers, self._procs[w].pid or 0, self._doing[w]
        return StallWatch(
            after,
            lambda: t,
            lambda waited, at: worker_stall_message(
                waited, at, w, k, pid, doing.now(), doing.started(), _main_script()
            ),
        )

    def _receive_watched(
        self, w: int, t: int, ready: collections.deque[Batch], watch: StallWatch
    ) -> bool:
        while True:
            msg = self._recv(w, t, watch)
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
            elif kind == _NOTES:
                merge_corrupt_news(pickle.loads(msg[1:]))
            else:  # _ERROR
                got, exc = pickle.loads(msg[1:])
                pid = self._procs[w].pid
                at = f"at step {got}" if got >= 0 else "while unpickling its source"
                exc.add_note(f"in headrace worker {w} of {self.cfg.workers} (pid {pid}), {at}")
                raise exc

    def _recv(self, w: int, t: int, watch: StallWatch) -> bytes:
        out = self._out[w]
        try:
            if watch.after_s is not None:
                # A dead worker's pipe polls ready: recv_bytes() then raises EOFError.
                while not out.poll(watch.due_in()):
                    watch.poll()
            msg = out.recv_bytes()
        except (EOFError, OSError) as exc:
            # EOF, or EOF inside a message ("OSError: got end of file during message": a
            # worker killed while it sent a chunk too large for the pipe, pickled).
            if not self._procs:
                raise  # closed meanwhile, from another thread: _run says so
            p = self._procs[w]
            p.join(timeout=1)
            if isinstance(exc, OSError) and p.exitcode is None:
                raise  # the pipe's own error, its worker alive
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
        """The chunk in slot ``s``: views of it (leased), or copies (the slot returns now).

        The slot goes back to its worker when the last array or tensor viewing any
        batch of its chunk is freed (a weak reference on the memoryview that every view
        keeps alive). A consumer that hoards batches would starve its workers of slots:
        once half a worker's slots are out on lease, its chunks are handed out as copies.
        """
        assert ring.layout is not None  # sent with the first chunk
        regions, fields, ragged, subs = ring.layout
        lo = s * ring.size
        whole = np.frombuffer(ring.mem[lo : lo + ring.size], np.uint8)
        copy = self.copy or 2 * ring.lent >= self.cfg.slots
        bases = []
        for at, dtype, shape in regions:
            r = whole[at : at + _nbytes(dtype, shape)].view(dtype).reshape(-1)
            bases.append(r.copy() if copy else r)
        out: Batch = {field[0]: _view(bases, field) for field in fields}
        for name, kind, mask, fill, hard in subs:  # as the source gave them
            data = out[name]
            if kind is not np.ma.MaskedArray:
                out[name] = data.view(kind)
                continue
            m = np.ma.MaskedArray(
                data,
                mask=np.ma.nomask if mask is None else _view(bases, mask),
                hard_mask=hard,
                copy=False,
            )
            if fill is not None:
                m.fill_value = np.frombuffer(fill[0], fill[1])[0]
            out[name] = m
        keys = list(out)
        for name, first, n, at in ragged:  # per sample, as the source gave them
            samples = out[name] = np.empty(n, dtype=object)
            for j in range(n):
                samples[j] = bases[first + j].reshape(regions[first + j][2])
            keys.insert(at, name)
        if ragged:  # in the batch's order (its samples lie after the other fields)
            out = {k: out[k] for k in keys}
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

    def _forget_forked(self) -> None:
        """In a child forked from this process, at the fork: forget the workers (the
        parent's children, whose pipes carry its batches), closing this process's copies
        of their pipes, the lifeline's too (held here, it kept them from seeing the
        parent die). Iterating here starts workers of this process's own."""
        self._closing = threading.RLock()  # a parent's thread may have held it at the fork
        self._forked = self._run_id
        self._run_id += 1
        # Not this process's children either: multiprocessing's exit handler terminated
        # them when a child of os.fork() exited normally (as a worker process's
        # bootstrap forgets its parent's children, which os.fork() does not).
        children: set[BaseProcess] = getattr(mp.process, "_children", set())
        for p in self._procs:
            children.discard(p)
        alive, conns = self._alive, (*self._out, *self._back)
        self._alive, self._procs, self._out, self._back, self._rings = None, [], [], [], []
        self._doing = []
        self._ready, self._started = [], None
        self._pending.clear()
        for c in (*conns, *([alive] if alive is not None else [])):
            c.close()

    def close(self) -> None:
        """Stop the workers (promptly: they exit at their next send) and drop the rings.

        Leased batches stay valid: their mapping lives until the last view dies. A
        process forked from the one that started them has none (:meth:`_forget_forked`).
        """
        # One at a time: a watchdog thread's close() and the iterator's own (its finally)
        # may come together; the second waits for the workers to be stopped, then finds
        # nothing left (reentrant: a finaliser may run inside close() in this thread).
        with self._closing:
            self._run_id += 1  # its iterator, and a start over under way, are stale
            for ready in self._ready:  # batches not handed out: their slots may go
                ready.clear()
            alive, procs, conns = self._alive, self._procs, (*self._out, *self._back)
            if alive is None and not procs:
                return  # closed already (perhaps at exit, before this iterator's finaliser)
            # Unlisted first: a close() reentering from a finaliser has nothing to do.
            self._alive, self._procs, self._out, self._back, self._rings = None, [], [], [], []
            self._doing = []
            self._started = None
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


def _forget_live() -> None:
    for batches in list(_LIVE):
        batches._forget_forked()


os.register_at_fork(after_in_child=_forget_live)


def _same_but_start(old: RingConfig, new: RingConfig) -> bool:
    """Whether workers that began with ``old`` can start over for ``new``: only the start
    and origin differ (the same source and transform objects; a new seed, say, makes new
    workers). Nothing is pickled again: a transform holding a tokenizer may pickle to
    megabytes, more than a pipe holds while its worker is busy."""
    if old.source is not new.source or old.loader.keys() != new.loader.keys():
        return False
    if (old.workers, old.slots, old.contiguous) != (new.workers, new.slots, new.contiguous):
        return False
    plain = (bool, int, float, str, type(None))
    return all(
        a is b or (type(a) is type(b) and isinstance(a, plain) and a == b)
        for a, b in ((old.loader[k], new.loader[k]) for k in old.loader)
    )


def _view(bases: list[NDArray[Any]], field: FieldAt) -> NDArray[Any]:
    """A field (or a masked field's mask) as a view of its region."""
    _, i, off, shape, strides = field
    b = bases[i]
    isz = b.itemsize
    return np.ndarray(
        shape, b.dtype, buffer=b, offset=off * isz, strides=tuple(x * isz for x in strides)
    )


def _split(arrays: Batch, n: int, ready: collections.deque[Batch]) -> None:
    """A chunk's ``n`` batches, back to back in ``arrays``, one by one into ``ready``
    (each laid out as its own samples decide: :func:`~headrace.pipeline._loader.lay_out`;
    its strings as wide as its own, as :func:`~headrace.pipeline._layout.split_chunk`
    makes them)."""
    per = {k: len(v) // n for k, v in arrays.items()}
    ragged, strings = ragged_keys(arrays), string_keys(arrays)
    for i in range(n):
        batch = {k: v[i * per[k] : (i + 1) * per[k]] for k, v in arrays.items()}
        batch = lay_out(batch, ragged) if ragged else batch
        ready.append(narrow_strings(batch, strings) if strings else batch)


# A worker that exits with an error before its first message never ran ``_worker``
# (whose errors come back as messages): it failed while starting, in
# multiprocessing's bootstrap, which re-imports the main module.
_NEVER_STARTED = (
    " It ended while starting, before headrace's worker code ran: its traceback is on "
    "stderr above. Worker processes start with forkserver or spawn and import the main "
    'module, so a script must start iterating under `if __name__ == "__main__":`.'
)


def _main_script() -> str | None:
    """The main module's file, where each worker imports it again, running its top-level
    code (as ``multiprocessing.spawn`` decides: not a package's ``__main__``, nor IPython)."""
    main = sys.modules.get("__main__")
    path: str | None = getattr(main, "__file__", None)
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if path is None or (name is not None and name.rpartition(".")[2] == "__main__"):
        return None
    if name is None and os.path.splitext(os.path.basename(path))[0] == "ipython":
        return None
    return path


#: Where a line may be guarded (``if __name__ == "__main__":``, or a form of it), or
#: runs only when called: what these hold is taken as not run again by a worker.
_GUARDS = (ast.If, ast.IfExp, ast.Match, ast.BoolOp)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _top_level(path: str) -> tuple[list[str], list[ast.AST], list[ast.stmt | ast.expr]]:
    """The script's lines, its statements outside any guard or function (run again by
    each worker), and its guards (parsed at each start: a few ms a script)."""
    with open(path, "rb") as fh:
        source = fh.read()
    tree = ast.parse(source)
    guards: list[ast.stmt | ast.expr] = [n for n in ast.walk(tree) if isinstance(n, _GUARDS)]

    def unguarded(node: ast.AST) -> Iterator[ast.AST]:
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, _GUARDS + _SCOPES):
                yield child
                yield from unguarded(child)

    lines = source.decode(errors="replace").splitlines()
    return lines, list(unguarded(tree)), guards


def _unguarded_main() -> str | None:
    """Why starting workers here would fail, or hang: the main module, which each worker
    imports again, calls ``init_process_group`` (a worker of rank 0 then failed on its
    store's taken port, the other ranks' joined the group a second time and waited for
    good, under torchrun every rank's), or starts them, outside ``if __name__ ==
    "__main__":``; ``None`` where it does not, or where that cannot be told (no script,
    or a condition around the line: it may be the guard)."""
    path = _main_script()
    if path is None:
        return None
    try:
        lines, nodes, guards = _top_level(path)
    except (OSError, SyntaxError, ValueError):
        return None
    main = vars(sys.modules["__main__"])
    frame = sys._getframe(1)
    while frame.f_back is not None and not (
        frame.f_globals is main and frame.f_code.co_name == "<module>"
    ):
        frame = frame.f_back
    here = frame.f_lineno if frame.f_globals is main else None

    def where(line: int) -> str:
        return f"{path} line {line} (`{lines[line - 1].strip()}`)"

    fix = (
        'Guard the script\'s top level with `if __name__ == "__main__":` (or call a main() '
        "from there), or use num_workers=0."
    )
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        if name == "init_process_group":
            return (
                f"{where(node.lineno)} starts a torch.distributed group in the script's "
                'top-level code, outside `if __name__ == "__main__":`. headrace\'s worker '
                "processes import the main module again (forkserver and spawn do), which "
                "would run it again in each: joining the group a second time, a worker fails "
                "(rank 0's, on its store's taken port) or waits for good (the other ranks', or "
                f"every rank's under torchrun). {fix}"
            )
    if here is None or any(n.lineno <= here <= (n.end_lineno or 0) for n in guards):
        return None
    statements = (n for n in nodes if isinstance(n, ast.stmt))
    if not any(n.lineno <= here <= (n.end_lineno or 0) for n in statements):
        return None
    return (
        f"{where(here)} starts headrace's worker processes from the script's top-level "
        'code, outside `if __name__ == "__main__":`. Each worker imports the main module '
        "again (forkserver and spawn do), which runs that code again there: it would start "
        "workers of its own, and run the rest again (a second init_process_group waits for "
        f"good). {fix}"
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
