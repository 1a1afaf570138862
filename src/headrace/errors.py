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
│   │   └── UnsupportedFormError      ... or sound ones in a form headrace does not read
│   │       └── CodecUnavailableError ... in this process: it lacks the codec
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
    "UnsupportedFormError",
]


class HeadraceError(Exception):
    """Base class of every error headrace raises on purpose."""


class ConfigError(HeadraceError, ValueError):
    """An argument or configuration value is not allowed."""


class DataError(HeadraceError):
    """Input data is unusable: wrong size, wrong shape, wrong values."""


class FormatError(DataError):
    """Bytes do not parse as the format they claim to be."""


class UnsupportedFormError(FormatError):
    """The file is in a form headrace does not read, though its bytes may be sound and are
    the same at every read: an HDF5 external link, virtual dataset of other files or
    external raw storage, an NPZ member compressed with bzip2 or LZMA, an NPY of Python
    objects, a 12-bit JPEG, an animated WebP, a gzip-compressed TFRecord. Not damage, so
    ``on_corrupt="replace"`` raises it rather than replacing every sample of such files
    (the run trained on the others alone, silently); the message says how to convert it.
    A check lists it, as the file's own problem."""


class CodecUnavailableError(UnsupportedFormError):
    """The file needs a codec this process has not loaded (an HDF5 filter plugin, an image
    decoder Pillow was built without): the bytes may be sound, and another process, or this
    one set up otherwise, reads them. Not damage, so ``on_corrupt="replace"`` raises it
    rather than replacing the file's samples, and a check stops at it rather than listing
    every such file as a bad one (every file that needs the codec fails alike)."""


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
