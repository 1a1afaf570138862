"""``--store-option KEY=VALUE``: object-store options on the command line, one parser for
every command that opens a store (``headrace check``, ``headrace probe``).

A plain KEY is one of :class:`~headrace.io.ObjectStore`'s own options (``endpoint``,
``region``, ``path_style``, ...); ``config.KEY`` and ``client_options.KEY`` go into those
dicts, where obstore takes most of GCS's and Azure's settings
(``config.service_account_key``, ``config.account_name``): without them a GCS or Azure
user could give credentials only as environment variables.
"""

from __future__ import annotations

import argparse
from typing import Any

from headrace.errors import ConfigError

__all__ = ["add_store_option", "store_options"]

_NESTED = ("config", "client_options")
_FLAGS = ("path_style", "allow_http")


def add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an object-store option (endpoint, region, ...), or one of obstore's keys as "
        "config.KEY=VALUE (config.account_name=..., config.service_account=KEY.json) or "
        "client_options.KEY=VALUE; repeat for more",
    )


def store_options(items: list[str]) -> dict[str, Any]:
    """The store options ``--store-option`` items give (``config.X`` into ``config``)."""
    options: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ConfigError(f"--store-option {item!r}: give it as KEY=VALUE")
        outer, dot, inner = key.partition(".")
        if not dot:
            options[key] = _flag(item, value) if key in _FLAGS else value
            continue
        if outer not in _NESTED or not inner:
            raise ConfigError(
                f"--store-option {item!r}: a dotted KEY is config.KEY=VALUE (obstore's store "
                "keys: config.account_name=..., config.service_account_key=...) or "
                "client_options.KEY=VALUE"
            )
        # A string, as obstore reads its own environment variables ("true", "30s").
        options.setdefault(outer, {})[inner] = value
    return options


def _flag(item: str, value: str) -> bool:
    """A yes/no store option from the command line (``path_style=false``)."""
    word = value.strip().lower()
    if word in ("true", "1", "yes", "on"):
        return True
    if word in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"--store-option {item!r}: give true or false")
