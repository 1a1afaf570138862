"""Page-aligned buffers from anonymous memory maps.

Aligned to the page (so O_DIRECT can read into them), zero-cost to reserve
(pages are faulted in on first write), and optionally backed by transparent
huge pages: filling a fresh 256 MiB buffer costs 65,536 page faults with 4 KiB
pages, which took 2.4-2.6x the time of filling a recycled buffer from the page
cache (``benchmarks/fresh_pages.py``, 2026-12-03; fresh huge pages 1.7-1.8x, some
fills much slower where a fault stalls to compact memory), so large buffers ask for
huge pages and callers recycle them.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import StorageError
from headrace.io import _in_flight as in_flight

__all__ = [
    "ADVISE",
    "ASK",
    "MADV_POPULATE_READ",
    "PAGE",
    "ask_for",
    "madvise",
    "page_aligned_empty",
    "populate_failed",
    "populate_file",
    "populate_read",
    "read_randomly",
    "will_need",
]

PAGE = mmap.PAGESIZE
#: Linux 5.14+: fault pages in and return an error instead of raising SIGBUS (not in ``mmap``).
MADV_POPULATE_READ = 22
_HUGE = 2 << 20


def page_aligned_empty(nbytes: int, *, huge: bool | None = None) -> NDArray[np.uint8]:
    """An uninitialised, page-aligned, writable uint8 array of ``nbytes``.

    The memory is released when the last array viewing it is gone.
    """
    size = max(PAGE, -(-nbytes // PAGE) * PAGE)
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if (huge if huge is not None else size >= 4 * _HUGE) and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            m.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # THP disabled or not supported here: 4 KiB pages still work
            pass
    return np.frombuffer(m, dtype=np.uint8, count=nbytes)


@cache
def _libc_madvise() -> Any:
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def madvise(view: NDArray[np.uint8], start: int, length: int, advice: int) -> None:
    """``madvise(advice)`` on bytes ``[start, start + length)`` of ``view``.

    ``view`` must be an array over a whole memory map (``np.frombuffer(map)``)
    and ``start`` page-aligned. Unlike ``mmap.madvise``, which holds the GIL
    for the whole call (populating 4 MiB of a map takes ~0.3 ms), this calls
    libc through ctypes, so other threads run meanwhile. Holding ``view`` keeps
    the map from being closed, so the address stays valid during the call.
    """
    owner = getattr(view.base, "obj", view.base)
    if not isinstance(owner, mmap.mmap) or len(owner) != view.size:
        # The kernel advises whole pages: on any other memory, DONTNEED could zero
        # bytes around the view that belong to someone else.
        raise ValueError("madvise needs an array over a whole memory map (np.frombuffer(map))")
    if not 0 <= start <= start + length <= view.size or start % PAGE:
        raise ValueError(f"madvise range [{start}, {start + length}) is not within the map")
    fn = _libc_madvise()
    if fn is None:  # no libc symbol here: the GIL-holding call does the same
        owner.madvise(advice, start, length)
        return
    if fn(view.ctypes.data + start, length, advice) != 0:
        err = ctypes.get_errno() or errno.EINVAL
        raise OSError(err, os.strerror(err))


def populate_read(address: int, length: int) -> None:
    """Fault in (read) the mapped pages ``[address, address + length)`` now.

    ``MADV_POPULATE_READ`` on raw addresses, GIL released: the caller keeps
    the mapping alive for the call and gives a page-aligned ``address``. Only
    reading advice is offered here: it changes no memory, so any mapped range
    is safe to pass, unlike :func:`madvise`'s. A page the storage cannot read
    is an ``OSError`` (``EFAULT``, or ``EIO``) rather than a SIGBUS at the next
    access; ``EINVAL`` means the kernel does not know the advice (before 5.14),
    ``ENOMEM`` that the range is not mapped. Without a libc symbol, nothing is
    done: the pages are faulted in by the access instead.
    """
    if address % PAGE or length < 0:
        raise ValueError(f"populate_read: address {address:#x} is not page-aligned")
    fn = _libc_madvise()
    if fn is None:
        return
    if fn(address, length, MADV_POPULATE_READ) != 0:
        err = ctypes.get_errno() or errno.EINVAL
        raise OSError(err, os.strerror(err))


def _hint(address: int, length: int, advice: int) -> None:
    """``madvise`` that changes no memory, on raw addresses, GIL released; an error
    (or no libc symbol) is ignored: the pages are read when touched, as without it."""
    if address % PAGE or length < 0:
        raise ValueError(f"madvise: address {address:#x} is not page-aligned")
    fn = _libc_madvise()
    if fn is not None:
        fn(address, length, advice)


def will_need(address: int, length: int) -> None:
    """Ask the kernel to start reading the mapped pages ``[address, address + length)``;
    nothing waits (``MADV_WILLNEED``: readahead requests, which a network mount serves
    many at once). Advice only: the caller keeps the mapping alive for the call and
    gives a page-aligned ``address``. Exactly those pages are read (up to the
    device's readahead size a call): the mapping's ``MADV_RANDOM`` does not apply."""
    _hint(address, length, mmap.MADV_WILLNEED)


#: Maps advised random and runs asked for (off only to measure against: the kernel's
#: read-around at every fault; benchmarks/mapped_readahead.py).
ADVISE = True
#: The most pages one ``MADV_WILLNEED`` is sure to start: the kernel reads at most
#: the larger of the device's readahead and largest request a call, and 128 KiB is
#: the readahead a device is given by default.
ASK = 128 << 10


def ask_for(address: int, length: int) -> None:
    """:func:`will_need` of all of ``[address, address + length)``: in pieces of
    :data:`ASK`, each read as one request (or a few), none waited for."""
    if not ADVISE:
        return
    for at in range(address, address + length, ASK):
        will_need(at, min(ASK, address + length - at))


def read_randomly(address: int, length: int) -> None:
    """Advise the file mapping ``[address, address + length)`` (page-aligned
    ``address``) that its pages are read at random (``MADV_RANDOM``): a page fault
    reads that page, not the kernel's read-around of ``read_ahead_kb`` about it
    (8 MiB on a disk set so: 32 rows of a 37 MB Arrow stream read all of it).
    Reads of longer stretches say so first (:func:`ask_for`, :func:`populate_file`)."""
    if ADVISE:
        _hint(address, length, mmap.MADV_RANDOM)


def populate_file(
    address: int, length: int, path: str, lo: int, hi: int, check_size: Callable[[], None]
) -> bool:
    """:func:`populate_read` of a file's mapped bytes ``[lo, hi)`` at ``address``: a
    failure is the :func:`populate_failed` error naming ``path`` and the bytes. False
    where the kernel has no such advice (before 5.14): the caller's access faults the
    pages in, as without it. An interrupted call (EINTR, EAGAIN) leaves its pages to
    the access too, and returns True. (The one policy of every mapped reader.)"""
    key = in_flight.begin(path, lo, hi)
    try:
        if length > PAGE:
            # Asked for first: a few reads of these pages, where a map advised random
            # (read_randomly) faulted them in one page, one read, at a time.
            ask_for(address, length)
        populate_read(address, length)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOSYS):
            return False
        if exc.errno in (errno.EINTR, errno.EAGAIN):
            return True
        raise populate_failed(path, lo, hi, exc, check_size) from exc
    finally:
        in_flight.end(key)
    return True


def populate_failed(
    path: str, lo: int, hi: int, exc: OSError, check_size: Callable[[], None]
) -> StorageError:
    """The error for a ``MADV_POPULATE_READ`` of file bytes ``[lo, hi)`` that failed.

    ``EFAULT`` is what an access would have met as SIGBUS: pages past a
    truncation, or pages the storage failed to read. Which one is what the user
    needs, so ``check_size`` (which raises for a file that shrank) is asked first.
    """
    code, why = exc.errno or errno.EIO, exc.strerror or str(exc)
    if code == errno.EFAULT:
        check_size()
        code, why = errno.EIO, "the storage could not read them (an I/O error)"
    return StorageError(
        code, f"{path}: reading bytes [{lo}, {hi}) through the file map failed: {why}"
    )
