"""Warnings that point at the user's line, not at headrace's.

A fixed ``stacklevel`` is right for one caller only: the same warning reached through
an adapter (``JaxLoader`` iterating its ``Loader``), a ``with`` block's ``__exit__`` or
a source's constructor pointed into headrace's own files, where a filter by module
(``-W error::RuntimeWarning:train``) cannot match and the line shown says nothing.
Python 3.12's ``skip_file_prefixes`` does this; 3.11 has it not. A leaf module (no
internal imports), like ``_closing``: every layer may use it.
"""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["warn_user"]

_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _inside(filename: str) -> bool:
    # abspath: a package imported through a relative sys.path entry has relative names
    return os.path.abspath(filename).startswith(_HERE)


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` at the first frame outside the headrace package: the user's
    line. A warning raised in one of headrace's threads (no user frame on its stack)
    points at the frame that started it (``threading``)."""
    frame = sys._getframe(1)
    level = 2  # 1 is this function's frame, 2 its caller's
    while frame.f_back is not None and _inside(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
