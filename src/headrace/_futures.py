"""Work done side by side, reported as if done in turn: all of it finishes, then
the first failure (in the order the work was given) is raised, with a note
counting the others."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, wait
from typing import TypeVar

__all__ = ["raise_first", "results"]

T = TypeVar("T")


def raise_first(errors: Sequence[BaseException], others: str) -> None:
    """Raise ``errors[0]`` (nothing if there are none), noted ``"<n> <others>"`` when
    more than one failed, e.g. ``others="other page fills also failed"``."""
    if not errors:
        return
    if len(errors) > 1:
        errors[0].add_note(f"{len(errors) - 1} {others}")
    raise errors[0]


def results(futures: Sequence[Future[T]], others: str) -> list[T]:
    """Each future's result, in order, once every one is done; a failure is raised
    by :func:`raise_first`."""
    wait(futures)
    raise_first([exc for f in futures if (exc := f.exception()) is not None], others)
    return [f.result() for f in futures]
