"""moto's S3 server as :class:`~headrace.emulate.LocalS3` runs it, less two costs per request.

moto 5's dispatcher looks each request's service up under a lock with
``backends.list_of_moto_modules()``, a generator that lists moto's package folder and
``stat``\\ s its ~170 entries every time: a path-style request to 127.0.0.1 names no
service in its host, so every request pays the scan twice (2-8 ms on a 2-core host, a
third of moto's time per ranged GET) and the lock makes the requests wait on each other.
The folder does not change while the server runs, so its listing is taken once.

werkzeug also logs a line per request through :mod:`logging` (a tenth of moto's time);
nobody reads them (the server's output is kept only for the message of a failed start),
so only warnings and errors are logged.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["main", "patch_moto"]


def patch_moto() -> None:
    """Take moto's module listing once; log werkzeug's warnings and errors only."""
    from moto import backends

    listing = getattr(backends, "list_of_moto_modules", None)
    if listing is not None:  # a moto that moved it serves as before, only slower
        modules = frozenset(listing())
        backends.list_of_moto_modules = lambda: modules
    logging.getLogger("werkzeug").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> None:
    """``python -m moto.server ARGS``, patched."""
    patch_moto()
    from moto.server import main as moto_main

    moto_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
