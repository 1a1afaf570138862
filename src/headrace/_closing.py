"""One base for objects that are closed by ``close()`` and used as ``with`` blocks."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self

__all__ = ["Closing"]


class Closing(ABC):
    """``with obj:`` returns ``obj`` and calls ``obj.close()`` on the way out, error or not.

    Subclasses implement :meth:`close`. Empty ``__slots__``, so a slotted
    subclass stays without a ``__dict__``.
    """

    __slots__ = ()

    @abstractmethod
    def close(self) -> None:
        """Release what the object holds (files, threads, worker processes)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
