"""What an object-store URL is told where the optional obstore is not installed."""

from __future__ import annotations

__all__ = ["obstore_missing"]


def obstore_missing(exc: ModuleNotFoundError) -> ModuleNotFoundError:
    """The error for an import of obstore that failed: still a ``ModuleNotFoundError``
    named ``obstore`` (what ``except ImportError`` looks at), saying which extra to
    install. One of an installed obstore's own missing parts is passed on as it was."""
    if exc.name != "obstore" and not str(exc.name).startswith("obstore."):
        return exc
    return ModuleNotFoundError(
        "object storage (s3://, gs://, az://, http(s)://, file:// URLs, and headrace.io's "
        "ObjectStore) needs obstore, which is not installed: pip install 'headrace[objects]' "
        "(local paths read without it)",
        name="obstore",
    )
