"""Flat token files: raw ``.bin`` (dtype from an argument or a JSON sidecar),
nanoGPT's uint16 ``train.bin``/``val.bin``, and Megatron-LM ``.bin``/``.idx`` pairs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import DTypeLike, NDArray

from headrace.errors import ConfigError, DataError, FormatError
from headrace.formats._megatron import MegatronIndex, read_megatron_index
from headrace.io import LocalFile

__all__ = ["TOKEN_DTYPES", "TokenFile", "open_token_file", "write_token_sidecar"]

TOKEN_DTYPES = (np.dtype(np.uint16), np.dtype(np.uint32), np.dtype(np.int32))
TokenFormat = Literal["auto", "raw", "nanogpt", "megatron"]


@dataclass(frozen=True, slots=True)
class TokenFile:
    """A validated token file: where it is, its dtype and length. No data is read."""

    path: str
    dtype: np.dtype[np.generic]
    num_tokens: int
    format: str
    index: MegatronIndex | None = None

    @property
    def nbytes(self) -> int:
        return self.num_tokens * self.dtype.itemsize

    def fingerprint(self) -> dict[str, object]:
        return {
            "path": os.path.basename(self.path),
            "bytes": self.nbytes,
            "dtype": self.dtype.str,
            "format": self.format,
        }

    def documents(self) -> NDArray[np.int64]:
        """Token offsets where documents start, then the total (Megatron files only)."""
        if self.index is None:
            raise ConfigError(f"{self.path}: only Megatron files index documents")
        return self.index.document_bounds()


def _sidecar_path(path: str) -> str:
    return path + ".json"


def write_token_sidecar(path: str | os.PathLike[str], dtype: DTypeLike) -> None:
    """Write ``PATH.json`` recording the dtype of a raw token file."""
    with open(_sidecar_path(os.fspath(path)), "w") as f:
        json.dump({"dtype": np.dtype(dtype).name}, f)


def _check_dtype(path: str, dtype: DTypeLike) -> np.dtype[np.generic]:
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise ConfigError(f"{path}: {dtype!r} is not a dtype") from exc
    if dt not in TOKEN_DTYPES:
        raise ConfigError(
            f"{path}: token dtype {dt} is not supported (expected uint16, uint32 or int32)"
        )
    return dt


def _sidecar_dtype(path: str) -> np.dtype[np.generic] | None:
    side = _sidecar_path(path)
    if not os.path.exists(side):
        return None
    try:
        with open(side) as f:
            meta = json.load(f)
        return _check_dtype(side, meta["dtype"])
    except (ValueError, KeyError, TypeError) as exc:
        raise FormatError(
            f'{side}: unreadable token sidecar (expected JSON like {{"dtype": "uint32"}}): {exc}'
        ) from exc


def open_token_file(
    path: str | os.PathLike[str],
    dtype: DTypeLike | None = None,
    *,
    format: TokenFormat = "auto",
) -> TokenFile:
    """Describe a token file after checking it; reads only sizes and headers.

    ``format="auto"`` picks Megatron when ``PATH.idx`` (or ``PATH`` minus
    ``.bin`` plus ``.idx``) exists, nanoGPT for ``train.bin``/``val.bin``
    without a sidecar (uint16), and raw otherwise (dtype from ``dtype`` or the
    ``PATH.json`` sidecar).
    """
    p = os.fspath(path)
    with LocalFile(p) as f:  # raises ObjectNotFoundError naming the path
        size = f.size
    idx = p[:-4] + ".idx" if p.endswith(".bin") else p + ".idx"
    if format == "auto":
        if os.path.exists(idx):
            format = "megatron"
        elif (
            os.path.basename(p) in ("train.bin", "val.bin")
            and dtype is None
            and not (os.path.exists(_sidecar_path(p)))
        ):
            format = "nanogpt"
        else:
            format = "raw"
    index = None
    if format == "megatron":
        if not os.path.exists(idx):
            raise DataError(f"{p}: Megatron token file has no index at {idx}")
        index = read_megatron_index(idx, size)
        dt = index.dtype
        if dtype is not None and np.dtype(dtype) != dt:
            raise ConfigError(f"{p}: dtype {np.dtype(dtype)} given but the index says {dt}")
    elif format == "nanogpt":
        dt = np.dtype(np.uint16)
    elif format == "raw":
        side = _sidecar_dtype(p)
        if dtype is None and side is None:
            raise ConfigError(
                f"{p}: raw token file needs a dtype: pass dtype='uint16'|'uint32' or write "
                f'{_sidecar_path(p)} with {{"dtype": ...}}'
            )
        chosen = _check_dtype(p, dtype) if dtype is not None else side
        assert chosen is not None
        dt = chosen
        if side is not None and dt != side:
            raise ConfigError(f"{p}: dtype {dt} given but the sidecar says {side}")
    else:
        raise ConfigError(f"{p}: unknown token format {format!r} (auto, raw, nanogpt, megatron)")
    if size % dt.itemsize:
        raise DataError(
            f"{p}: file size {size} is not a multiple of the {dt} item size {dt.itemsize}: "
            f"wrong dtype or a truncated file"
        )
    return TokenFile(p, dt, size // dt.itemsize, format, index)
