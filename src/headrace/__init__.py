"""headrace: a deterministic, storage-aware training data loader."""

from headrace.errors import (
    ConfigError,
    DataError,
    FormatError,
    HeadraceError,
    ReadEOFError,
    StateError,
    StorageError,
)

__all__ = [
    "ConfigError",
    "DataError",
    "FormatError",
    "HeadraceError",
    "ReadEOFError",
    "StateError",
    "StorageError",
]

__version__ = "0.1.0"
