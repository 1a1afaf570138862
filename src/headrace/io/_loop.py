"""A private asyncio event loop on its own thread, for callers that are not async.

obstore's async calls are driven by its own Tokio runtime; the Python loop only
awaits their futures, so one loop thread keeps hundreds of requests in flight.
Each owner has its own loop (never the caller's), so a user's loop is never
blocked and closing the owner joins the thread: nothing leaks.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from headrace.io import _exit
from headrace.io._waits import result

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """An event loop running on a daemon thread until :meth:`close`."""

    __slots__ = ("_inline", "_loop", "_pid", "_thread")

    def __init__(self, name: str = "headrace-aio") -> None:
        self._loop = asyncio.new_event_loop()
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        #: Held while the loop runs in a caller's thread: Python 3.12 starts no thread in an
        #: exit handler (RuntimeError "can't create new thread at interpreter shutdown"), so a
        #: store first used there (a final checkpoint written at exit) runs its requests in
        #: the caller's thread, one call at a time. None: the loop has its own thread.
        self._inline: threading.Lock | None = None
        try:
            self._thread.start()
        except RuntimeError as exc:
            if "interpreter shutdown" not in str(exc):
                self._loop.close()
                raise
            self._inline = threading.Lock()
        except BaseException:
            # Interrupted (Ctrl-C) while start() waited for the thread, which may run
            # anyway: its owner never got this object to close, so stop it now.
            self.stop_soon()
            raise

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            loop = self._loop
            # A run() racing close() may have queued work after the stop: let
            # its callbacks create their tasks, then cancel every task, so no
            # caller waits forever on a future of a closed loop.
            while True:
                loop.run_until_complete(asyncio.sleep(0))
                tasks = asyncio.all_tasks(loop)
                if not tasks:
                    break
                for task in tasks:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    @property
    def inline(self) -> bool:
        """Whether coroutines run in their callers' threads, one call at a time (no thread
        could start: see ``_inline``), not on a loop of their own."""
        return self._inline is not None

    @property
    def usable(self) -> bool:
        """False after close, or in a child after ``fork`` (the thread did not survive)."""
        if self._inline is not None:
            return self._pid == os.getpid() and not self._loop.is_closed()
        return self._pid == os.getpid() and self._thread.is_alive()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (or exception)."""
        future = self.submit(coro)
        try:
            return result(future)
        except BaseException:
            # Interrupted (Ctrl-C) or failed: make sure nothing keeps running behind our back.
            future.cancel()
            raise
        finally:
            del future  # (the error's traceback holds this frame: see result())

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule ``coro`` on the loop; its result as a future (not waited for).

        Started in the calling thread's context (``_exit.caller_context``): a request
        an exit handler makes is not held by the exit. Without a thread of its own (see
        ``_inline``) the coroutine runs to its end here, and the future is done."""
        if self._inline is not None:
            out: Future[T] = Future()
            try:
                with self._inline:
                    out.set_result(self._loop.run_until_complete(coro))
            except BaseException as exc:
                out.set_exception(exc)
            return out
        try:
            return _exit.caller_context().run(asyncio.run_coroutine_threadsafe, coro, self._loop)
        except RuntimeError:  # the loop closed meanwhile: nobody will await coro
            coro.close()
            raise

    def stop_soon(self) -> None:
        """Ask the loop to stop, without waiting for its thread: safe from any thread
        (the loop's own included) and from a finaliser. Idempotent."""
        if self._pid != os.getpid():
            return
        if self._inline is not None:  # no loop running between calls: closed if none is
            if self._inline.acquire(blocking=False):
                try:
                    self._loop.close()
                finally:
                    self._inline.release()
            return
        try:
            self._loop.call_soon_threadsafe(self._loop.stop)
        except RuntimeError:  # the loop has closed already
            pass

    def stop_with(self, owner: object) -> None:
        """Stop the loop once ``owner`` is garbage collected (an owner dropped without
        ``close()``): the thread refers to the loop, not to its owner, so nothing else
        would ever end it."""
        # Not at exit (atexit=False): weakref's own exit handler ran before headrace's
        # settled the requests in flight, and the loop it stopped cancelled them under
        # their callers (a daemon thread in get_many printed a CancelledError). A loop
        # left running is a daemon thread blocked in select, stopped at finalization.
        weakref.finalize(owner, self.stop_soon).atexit = False

    def close(self) -> None:
        if self._pid != os.getpid():
            return  # a forked child: the thread and loop belong to the parent
        if self._inline is not None:
            with self._inline:
                self._loop.close()
        elif self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
