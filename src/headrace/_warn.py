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

#: Modules whose frames start threads: a thread's first frame outside headrace in one
#: of them has no user line above it.
_THREADS = ("threading", "concurrent.futures")

_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _inside(filename: str) -> bool:
    # abspath: a package imported through a relative sys.path entry has relative names
    return os.path.abspath(filename).startswith(_HERE)


def warn_user(message: str, category: type[Warning] = UserWarning, *, varies: bool = False) -> None:
    """``warnings.warn`` at the first frame outside the headrace package: the user's
    line. A warning raised in one of headrace's threads (no user frame on its stack)
    points at headrace's line that warned: the first frame outside was ``threading``'s,
    whose line says nothing and whose name no filter means (a full cache's "stopped
    writing" pointed at threading.py until 2026-12-07).

    ``varies``: the text differs every time (seconds waited, a step), so it is kept in
    no module's ``__warningregistry__``. Python's ``"default"`` action remembers each
    text it showed there, to show it once: a run of days that stalled now and then
    grew the user's module's registry by an entry a warning, without bound (200 steps
    warning at every wait: 10 entries more than 50 steps). Such texts never repeat, so
    remembering them showed nothing less."""
    frame = sys._getframe(1)
    level = 2  # 1 is this function's frame, 2 its caller's
    while frame.f_back is not None and _inside(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    if frame.f_globals.get("__name__", "").startswith(_THREADS):
        frame, level = sys._getframe(1), 2
    if not varies:
        warnings.warn(message, category, stacklevel=level)
        return
    # As warnings.warn calls it (filters match the module's __name__), less the registry.
    # No module_globals, as warnings.warn passes none: with them the line shown is asked
    # of the module's loader, and a script run by `python -c` or stdin has a loader that
    # raises (ImportError: '__main__' is not a built-in module).
    warnings.warn_explicit(
        message,
        category,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=frame.f_globals.get("__name__", "<string>"),
        registry=None,
    )
