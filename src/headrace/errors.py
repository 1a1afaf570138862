"""The exception tree of headrace.

Every error a user can see is one of these. Storage back-ends map their own
exceptions here at the boundary (``raise ReadError(...) from exc``), and every
message names the file or key, the byte range where one applies, what was
found and what was expected.

```
HeadraceError
├── ConfigError (ValueError)          a bad argument or configuration
├── DataError                         bad input data
│   ├── FormatError                   bytes that do not parse as their format
│   │   └── CodecUnavailableError     ... or that this process lacks the codec for
│   └── EmptyRowsError                replacement limit exceeded for all-padding rows
├── StateError                        a checkpoint that does not fit this loader
└── StorageError (OSError)            the storage failed us
    ├── ReadEOFError (EOFError)       a read past the end of a file or object
    ├── ObjectNotFoundError           404 / no such file
    ├── PermissionDeniedError         403 / EACCES
    └── TransientStorageError         5xx, throttling, timeouts (retried first)
```
"""

from __future__ import annotations

__all__ = [
    "CodecUnavailableError",
    "ConfigError",
    "DataError",
    "EmptyRowsError",
    "FormatError",
    "HeadraceError",
    "ObjectNotFoundError",
    "PermissionDeniedError",
    "ReadEOFError",
    "StateError",
    "StorageError",
    "TransientStorageError",
]


class HeadraceError(Exception):
    """Base class of every error headrace raises on purpose."""


class ConfigError(HeadraceError, ValueError):
    """An argument or configuration value is not allowed."""


class DataError(HeadraceError):
    """Input data is unusable: wrong size, wrong shape, wrong values."""


class FormatError(DataError):
    """Bytes do not parse as the format they claim to be."""


class CodecUnavailableError(FormatError):
    """The file needs a codec this process has not loaded (an HDF5 filter plugin, an image
    decoder Pillow was built without): the bytes may be sound, and another process, or this
    one set up otherwise, reads them. Not damage, so ``on_corrupt="replace"`` raises it
    rather than replacing the file's samples, and a check stops at it rather than listing
    every such file as a bad one."""


class EmptyRowsError(DataError):
    """Rows stayed empty (all padding) after their replacement limit."""


class StateError(HeadraceError):
    """A saved loader state does not fit this loader (other data, other version)."""


class StorageError(HeadraceError, OSError):
    """Storage failed: a local file or an object store."""


class ReadEOFError(StorageError, EOFError):
    """A read asked for bytes past the end of a file or object."""


class ObjectNotFoundError(StorageError, FileNotFoundError):
    """The file or object does not exist."""


class PermissionDeniedError(StorageError, PermissionError):
    """The store refused access to the file or object."""


class TransientStorageError(StorageError):
    """A failure worth retrying (5xx, throttling, timeouts) that outlived its retries."""
