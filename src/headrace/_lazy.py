"""A package's names imported on first use (PEP 562 module ``__getattr__``), for
``headrace.io`` (obstore is an optional extra) and ``headrace.emulate`` (a server
process imports none of the others' modules)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, where: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``name`` imported from the module
    ``where[name]`` (absolute, or relative to ``package``) and kept in ``namespace``
    (the package's globals), so it is looked up once.

    A name whose module cannot be imported (``ObjectStore`` without obstore) raises
    that module's error, which says which extra to install, from ``getattr`` and
    ``hasattr`` alike: an ``AttributeError`` would make ``hasattr`` answer ``False``,
    but ``from package import name`` turns one into "cannot import name", without the
    extra. Such a name is left out of the package's ``__all__``, so that ``import *``
    works without the extra."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    return __getattr__
