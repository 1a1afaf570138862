"""What bytes mean: token streams, rows, pairs, files, tables."""

from headrace.formats._megatron import (
    MEGATRON_MAGIC,
    MegatronIndex,
    read_megatron_index,
    write_megatron_index,
)
from headrace.formats._token_source import TokenSource, TokenStats
from headrace.formats._tokens import TOKEN_DTYPES, TokenFile, open_token_file, write_token_sidecar

__all__ = [
    "MEGATRON_MAGIC",
    "TOKEN_DTYPES",
    "MegatronIndex",
    "TokenFile",
    "TokenSource",
    "TokenStats",
    "open_token_file",
    "read_megatron_index",
    "write_megatron_index",
    "write_token_sidecar",
]
