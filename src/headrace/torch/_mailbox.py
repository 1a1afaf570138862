"""Where the main process's :class:`~headrace.torch.TorchDataset` stands, shared with
the persistent workers of a stock ``DataLoader`` over it.

A DataLoader worker copies the dataset once, when it starts (forked, or unpickled by
spawn and forkserver), and each of its iterations starts where that copy says. A
persistent worker outlives the iteration, and a DataLoader sends it nothing of the
dataset at the next ``iter()`` (only torch's ``_ResumeIteration``): a
``ds.load_state_dict(ds.state_at(step))`` in the main process between epochs was
ignored, and the persistent workers started again where the main process had stood
when they started (step 0: the run's first steps again), where new workers started at
the loaded step. The main process posts its position here at each change; a worker's
later iterations start at the last post, as new workers would.

A state loaded in the main process starts one iteration: the first whose workers begin
after it (:meth:`Mailbox.spent`). The main process never iterates a stock DataLoader's
dataset, so its copy keeps the loaded step, and each epoch's new workers (or persistent
ones) started there again: a Lightning fit resumed at step 6 of an exact pass of 12
trained every later epoch on its last 6 batches.

The workers' way back is their batches: a batch carries the corrupt files its worker
replaced since its last one (:class:`Relayed`), merged into the main process's sources
as it arrives there (see its docstring for why not a channel beside the batches).
"""

from __future__ import annotations

import mmap
import os
import weakref
from collections.abc import Callable
from multiprocessing import heap, reduction
from multiprocessing.context import get_spawning_popen
from typing import Any

from torch._utils import ExceptionWrapper
from torch.utils.data import get_worker_info

from headrace._ring_worker import no_shm
from headrace._warn import warn_user
from headrace.errors import DataError
from headrace.formats._file_source import merge_corrupt_news, relay_news, say_corrupt_news

__all__ = ["Carrying", "Mailbox", "Relayed"]

# The cells: a count of posts, then the start step, phase, seed and origin (-1 without);
# then, written by the workers, the step their last iteration's batches began at and the
# count of posts then plus one (0: none began), as worker 0 watches for a repeat; the
# count of posts plus one when any worker last handed over a batch; and the last
# Lightning evaluation's iteration that workers began (:meth:`Mailbox.evaluated`); the
# count of posts when the last one was a loaded state's (0: none was), the iteration that
# began from it (:meth:`Mailbox.spent`), and the step that the iteration whose worker last
# handed over a first batch began at (:meth:`Mailbox.working`).
(
    _VERSION,
    _START,
    _PHASE,
    _SEED,
    _ORIGIN_STEP,
    _ORIGIN_SAMPLE,
    _BEGAN,
    _BEGAN_AFTER,
    _WORKED_AFTER,
    _EVALUATED,
    _LOADED,
    _SPENT,
    _WORKED_FROM,
) = range(13)
_BYTES = 13 * 8

# The fields of the _EVALUATED cell, in one integer (read and written whole, so that no
# worker sees half of another's note): the iteration, the count of posts, whether an
# evaluation other than a sanity check had begun before it, and whether it was one.
_ITERATION_BITS, _POSTS_BITS = 36, 24

Position = tuple[int, int, int, tuple[int, int] | None]


class Mailbox:
    """Thirteen shared integers, seven written by the process that made it, read by its
    DataLoader's workers, six by the workers (:meth:`again`, :meth:`working`,
    :meth:`evaluated`, :meth:`spent`): a block of
    ``multiprocessing``'s shared heap (one file descriptor a process for all of them,
    not one a dataset), inherited by forked workers and handed to spawn and forkserver
    ones with their start.

    Where the heap cannot be made (``/dev/shm`` not writable for the job's uid, as on
    some HPC nodes and hardened containers), an anonymous shared map stands in: forked
    workers inherit it, a dataset without workers needs nothing more, and a spawn or
    forkserver worker's start is refused naming ``/dev/shm`` (:meth:`__reduce__`).
    ``TorchDataset(...)`` itself raised PermissionError there, with ``num_workers=0``."""

    def __init__(self) -> None:
        self._why: OSError | None = None  # why the heap could not be made
        try:
            self._keep: Any = heap.BufferWrapper(_BYTES)  # freed (to the heap) with this
            self._cells = self._keep.create_memoryview().cast("q")
        except OSError as exc:
            self._why = exc
            self._keep = mmap.mmap(-1, _BYTES)  # MAP_SHARED: forked workers share it
            self._cells = memoryview(self._keep).cast("q")
        self._cells[:] = memoryview(bytes(_BYTES)).cast("q")  # a used block is not zeroed
        self._seen = 0  # the post this copy's position stands for
        self._owner = os.getpid()

    def post(self, position: Position, *, loaded: bool = False) -> None:
        """In the process that made it (elsewhere nothing): the position its dataset's
        workers start their next iteration at (``loaded``: a state loaded there, which
        starts only the first iteration to begin after it, :meth:`spent`)."""
        if os.getpid() != self._owner:
            return
        start, phase, seed, origin = position
        cells = self._cells
        cells[_START], cells[_PHASE], cells[_SEED] = start, phase, seed
        cells[_ORIGIN_STEP], cells[_ORIGIN_SAMPLE] = (-1, -1) if origin is None else origin
        cells[_LOADED] = cells[_VERSION] + 1 if loaded else 0
        cells[_VERSION] += 1  # last: a reader that sees the count sees the position
        self._seen = cells[_VERSION]

    def news(self) -> Position | None:
        """The position posted since this copy's (``None`` if none was)."""
        cells = self._cells
        version = cells[_VERSION]
        if version == self._seen:
            return None
        self._seen = version
        origin = cells[_ORIGIN_STEP], cells[_ORIGIN_SAMPLE]
        return cells[_START], cells[_PHASE], cells[_SEED], None if origin[0] < 0 else origin

    def again(self, start: int) -> bool:
        """In a DataLoader worker handing over the first batch of an iteration that starts
        at ``start``: note it, and tell whether the last such iteration began there too
        with nothing posted since (the consumer is given the same batches again: a stock
        DataLoader's workers cannot tell the main process where its consumer stopped)."""
        cells = self._cells
        mark = cells[_VERSION] + 1
        same = cells[_BEGAN_AFTER] == mark and cells[_BEGAN] == start
        cells[_BEGAN], cells[_BEGAN_AFTER] = start, mark
        return bool(same)

    def working(self, start: int) -> None:
        """In a DataLoader worker handing over the first batch of an iteration that began
        at ``start``: note that the consumer's step is now this worker's business, not the
        main process's, and where the consumer's batches began (:meth:`worked_from`)."""
        cells = self._cells
        cells[_WORKED_FROM] = start
        cells[_WORKED_AFTER] = cells[_VERSION] + 1  # last: as post() writes its count

    def spent(self, iteration: int) -> bool:
        """In a DataLoader worker beginning ``iteration`` (a number its other workers give
        too) from the position its copy holds: whether that is a state loaded in the main
        process (the last post, :meth:`post`) that an earlier iteration began from. A
        loaded state starts one iteration; the next ones start where an iteration over
        it leaves the dataset (an exact pass: over, at step 0), as without workers. The
        first worker of the first iteration after the load notes it."""
        cells = self._cells
        version = int(cells[_VERSION])
        if self._seen != version or cells[_LOADED] != version:
            return False  # a position not loaded (or not this copy's): as it always was
        iteration %= 1 << _ITERATION_BITS
        mark = int(cells[_SPENT])
        if mark > 0 and mark % (1 << _POSTS_BITS) == version % (1 << _POSTS_BITS):
            return mark >> _POSTS_BITS != iteration  # (this iteration's: not yet spent)
        cells[_SPENT] = (iteration << _POSTS_BITS) | (version % (1 << _POSTS_BITS))
        return False

    def load_spent(self) -> bool:
        """In the process that made it: whether the last post was a loaded state that
        workers have begun an iteration from (:meth:`spent`)."""
        cells = self._cells
        version = int(cells[_VERSION])
        mark = int(cells[_SPENT])
        return bool(
            cells[_LOADED] == version
            and mark > 0
            and mark % (1 << _POSTS_BITS) == version % (1 << _POSTS_BITS)
        )

    def evaluated(self, iteration: int, *, sanity: bool) -> bool:
        """In a DataLoader worker beginning an iteration of a Lightning evaluation
        (``iteration``: a number its other workers give too; ``sanity``: a sanity check):
        whether an evaluation other than a sanity check began before it, since the last
        post (an exact pass then starts over: the main process's own iterations tell that
        to ``starts_at``, a stock DataLoader's workers are each a fresh copy). The workers
        of one iteration answer alike, whichever comes first: the first notes its answer."""
        cells = self._cells
        posts = cells[_VERSION] % (1 << _POSTS_BITS)
        iteration %= 1 << _ITERATION_BITS
        mark = int(cells[_EVALUATED])
        now = mark > 0 and (mark >> 2) % (1 << _POSTS_BITS) == posts
        if now and mark >> (2 + _POSTS_BITS) == iteration:
            return bool(mark & 2)  # another worker of this iteration came first
        went = now and mark & 3 != 0  # (one before it had, or it was one)
        cells[_EVALUATED] = (
            (iteration << (2 + _POSTS_BITS)) | (posts << 2) | (went << 1) | (not sanity)
        )
        return went

    def evaluations_moved(self) -> bool:
        """In the process that made it: whether the next Lightning evaluation's workers
        start an exact pass over (:meth:`evaluated`: one other than a sanity check began
        since the last post)."""
        cells = self._cells
        mark = int(cells[_EVALUATED])
        posts = cells[_VERSION] % (1 << _POSTS_BITS)
        return mark > 0 and (mark >> 2) % (1 << _POSTS_BITS) == posts and mark & 3 != 0

    def worked(self) -> bool:
        """In the process that made it: whether a worker has handed over batches since its
        last post (its dataset's position is then only where their iteration began)."""
        return bool(self._cells[_WORKED_AFTER] == self._cells[_VERSION] + 1)

    def worked_from(self) -> int:
        """In the process that made it, once :meth:`worked`: the step that the iteration
        whose batches the consumer now gets began at (after a loaded state's, the next
        iteration's workers begin elsewhere: :meth:`spent`)."""
        return int(self._cells[_WORKED_FROM])

    def __reduce__(self) -> tuple[Any, ...]:
        # Shared only with a worker being started (its heap's fd handed over with it, as
        # multiprocessing's own reduction of the heap does, in terms any pickler takes):
        # a copy pickled or deep-copied otherwise is another dataset, with a mailbox of
        # its own.
        if get_spawning_popen() is None:
            return (Mailbox, ())
        if self._why is not None:
            raise no_shared_heap(self._why)
        (arena, start, _), _ = self._keep._state
        try:
            fd = hand_over(arena.fd)
        except Exception:  # a start that takes no descriptors (not one of Python's)
            return (Mailbox, ())  # its worker's iterations start where the copy came from
        return (_shared, (arena.size, fd, start, self._seen, self._owner))


def no_shared_heap(why: OSError) -> OSError:
    """A spawn or forkserver worker's start where the shared heap could not be made."""
    err = OSError(why.errno, no_shm(why))
    err.__cause__ = why
    return err


#: The heap descriptors handed to each worker being started: once each (several
#: datasets of one heap, in a ChainDataset: spawn refused a descriptor given twice).
_handed: weakref.WeakKeyDictionary[Any, dict[int, Any]] = weakref.WeakKeyDictionary()


def hand_over(fd: int) -> Any:
    given = _handed.setdefault(get_spawning_popen(), {})
    if fd not in given:
        given[fd] = reduction.DupFd(fd)
    return given[fd]


def _shared(size: int, fd: Any, start: int, seen: int, owner: int) -> Mailbox:
    """The mailbox of the main process, in a worker it started."""
    # The descriptor stays open, as multiprocessing's own rebuilt heaps keep theirs: the
    # other datasets of that heap in the same worker's pickle map it too.
    whole = mmap.mmap(fd.detach(), size)
    box = Mailbox.__new__(Mailbox)
    box._keep = whole
    box._cells = memoryview(whole)[start : start + _BYTES].cast("q")
    box._seen, box._owner = seen, owner
    return box


CorruptNews = dict[str, tuple[list[tuple[str, ...]], int]]  # (name, why, *broken keys)


class Relayed(dict[str, Any]):
    """A stock DataLoader worker's batch and the corrupt files its worker replaced since
    its last batch (``take_corrupt_news``): unpickled in the main process as the plain
    batch, the files merged into the sources there (``merge_corrupt_news``: logged once
    there and counted against ``max_corrupt``, as without workers). Without it each
    worker's copy kept its own: the main process's ``corrupt_files`` stayed ``{}``.

    The batch, not a channel beside it: its own queue brings it to the main process, at
    once, whatever the start method, and with nothing of ours to drain there (a stock
    DataLoader runs none of the dataset's code in the main process while it iterates);
    a file is listed by the time the batch it was replaced for is in the loop's hands.
    A ``collate_fn`` of the user's makes another object of it (a tuple, a class of
    theirs): the fetcher's collate is wrapped in the worker (:class:`Carrying`), which
    sends the news with whatever it made."""

    def __init__(self, batch: dict[str, Any], news: CorruptNews, through: str = "") -> None:
        super().__init__(batch)
        self.news = news if isinstance(news, Tidings) else Tidings(news, through)

    def __copy__(self) -> Relayed:
        # The worker's collate (default_convert) copies the batch: the news go on with it.
        return Relayed(self, self.news)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_arrived, (dict(self), self.news.take()))


class Tidings(dict[str, tuple[list[tuple[str, ...]], int]]):
    """The corrupt news a :class:`Relayed` batch carries (shared with its copies), until
    sent: taken once, by the batch's pickling or by :class:`Carrying`. Freed untaken, the
    batch went no further than the worker: code between the dataset and the DataLoader
    (``through``, a dataset of the user's over it) took it apart; said there, once a
    worker, as the main process's source would list none of them, silently."""

    def __init__(self, news: CorruptNews, through: str) -> None:
        super().__init__(news)
        self.through = through

    def take(self) -> CorruptNews:
        news = dict(self)
        self.clear()  # (a copy of the batch inside what a collate made carries none again)
        return news

    def __del__(self) -> None:
        if self:
            lost(self.take(), self.through)


_said_lost = False


def lost(news: CorruptNews, through: str) -> None:
    """Log in this worker the corrupt files its batches could not carry to the main
    process, and warn of it once (the files are each logged)."""
    global _said_lost
    say_corrupt_news(news)
    if _said_lost:
        return
    _said_lost = True
    warn_user(
        f"TorchDataset: corrupt files replaced in DataLoader worker process {os.getpid()} "
        "did not reach the main process (logged here): the batch that carried them was "
        f"taken apart by {through or 'code between the TorchDataset and the DataLoader'} "
        "before the DataLoader sent it, so the main process's source.corrupt_files and "
        "replaced_samples leave them out, and its max_corrupt does not count them. Give "
        "the DataLoader the TorchDataset itself and do per-batch work in its collate_fn "
        "(which keeps them) or in your loop, or use "
        "headrace.torch.HeadraceDataLoader(ds, num_workers=k).",
        RuntimeWarning,
        varies=True,
    )


class Carrying:
    """A DataLoader fetcher's ``collate_fn``, in a worker of it over a TorchDataset: what
    it makes of a :class:`Relayed` batch (a dict of its own, a tuple, an object of the
    user's class) goes to the main process with the batch's news (:class:`Parcel`).
    A collate that keeps the batch (the default's copy) leaves the news on it."""

    def __init__(self, collate: Callable[[Any], Any]) -> None:
        self.collate = collate

    def __call__(self, data: Any) -> Any:
        try:
            out = self.collate(data)
        except BaseException:
            if isinstance(data, Relayed):  # (the error goes to the main process instead)
                # Its worker's next batch carries them, or, none left, the iteration's end
                # says them here (they were said here at once, and the main process's
                # source, which counts them against max_corrupt, never had them).
                relay_again(data.news.take())
            raise
        if isinstance(data, Relayed) and not isinstance(out, Relayed):
            news = data.news.take()  # (once: a copy of it inside ``out`` carries none)
            if news:
                return Parcel(out, news)
        return out


def relay_again(news: CorruptNews) -> None:
    """Put ``news`` back among this worker's corrupt news for its next batch
    (:func:`~headrace.formats._file_source.take_corrupt_news`)."""
    for token, (found, replaced) in news.items():
        for one in found:
            relay_news(token, one)
        if replaced:
            relay_news(token, None, replaced)


class Parcel:
    """What a user's ``collate_fn`` made of a :class:`Relayed` batch, and its news:
    unpickled in the main process as that, the news merged (:func:`_arrived`)."""

    def __init__(self, batch: Any, news: CorruptNews) -> None:
        self.batch, self.news = batch, news

    def __reduce__(self) -> tuple[Any, ...]:
        return (_arrived, (self.batch, self.news))


def _arrived(batch: Any, news: CorruptNews) -> Any:
    """A :class:`Relayed` batch (or a :class:`Parcel`) in the process that unpickles it
    (the DataLoader's main thread, or its pin-memory thread): its news merged, the batch
    as it was. A merge over ``max_corrupt`` comes as the worker's own errors do (torch's
    ``ExceptionWrapper``, raised in the loop: raised here, a pin-memory thread died of
    it, unsaid). Still in the worker (a ``copy.deepcopy`` of it there), the news stay
    with the copy."""
    if not news:
        return batch
    if get_worker_info() is not None:
        return Relayed(batch, news) if type(batch) is dict else Parcel(batch, news)
    try:
        merge_corrupt_news(news)
    except DataError:
        where = "in the main process, listing a worker's corrupt files"
        return ExceptionWrapper(where=where)  # type: ignore[no-untyped-call]
    return batch
