"""The codecs of MosaicML Streaming's compressed MDS shards, and their hashes.

Streaming (``streaming/base/compression.py``) compresses a shard whole, as one
stream, with ``compression`` naming the codec and its level (``"zstd"``,
``"zstd:7"``, ``"gz:9"``, ``"bz2"``, ``"br:11"``, ``"snappy"``). The level only
mattered to the writer; decompressing needs the family. ``gz`` and ``bz2`` come
from the standard library, ``zstd`` from the ``zstandard`` package (Streaming
writes with ``zstd``; both write and read the standard frame), ``br`` from
``brotli`` and ``snappy`` from ``python-snappy``, each imported where used.

Decompression is bounded by ``raw_data.bytes``: a stream that holds more is
refused without decompressing it all (gz, bz2, zstd, br; a zstd frame or a snappy
header that states another size before decompressing any), and one
that holds less, or is cut or damaged, is refused naming the shard.
"""

from __future__ import annotations

import bz2
import hashlib
import threading
import zlib
from collections.abc import Callable
from typing import Any

from headrace.errors import ConfigError, FormatError

__all__ = ["CODECS", "check_hashes", "codec_family", "decompress", "require_codec"]

#: Each codec family Streaming writes, with the package that reads it (``None``: stdlib)
#: and how to install it.
CODECS: dict[str, tuple[str | None, str]] = {
    "zstd": ("zstandard", "pip install 'headrace[mds]'"),
    "gz": (None, ""),
    "bz2": (None, ""),
    "br": ("brotli", "pip install 'brotli>=1.2'"),
    "snappy": ("snappy", "pip install python-snappy"),
}


def codec_family(codec: object, where: str) -> str:
    """The family of Streaming's ``compression`` value (``"zstd:7"``: ``"zstd"``)."""
    family, sep, level = str(codec).partition(":")
    if (
        not isinstance(codec, str)
        or family not in CODECS
        or (sep and (not level.isdigit() or family == "snappy"))
    ):
        raise FormatError(
            f"{where}: compression {codec!r} is no codec Streaming writes; headrace reads "
            "zstd, gz, bz2, br and snappy, with an optional ':LEVEL' (snappy has none)"
        )
    return family


def require_codec(family: str, where: str) -> None:
    """Refuse, naming what to install, a codec whose package is missing."""
    module, install = CODECS[family]
    if module is None:
        return
    try:
        found = __import__(module)
    except ImportError as exc:
        raise ConfigError(
            f"{where}: its shards are compressed with {family}, which needs the {module!r} "
            f"package: {install}"
        ) from exc
    if family == "br" and not hasattr(found.Decompressor, "can_accept_more_data"):
        # Before 1.2 brotli made a stream whole, however much more it held than it should.
        raise ConfigError(
            f"{where}: its shards are compressed with br, which needs brotli 1.2 or later "
            f"(to bound what a stream decompresses to): {install}"
        )


_local = threading.local()


def _zstd(data: Any, size: int) -> bytes:
    # A decompressor a thread, kept: making one cost 15 us, more than an ArrayRecord
    # chunk of one 1 KiB record takes to decompress (a decompressor is not thread-safe).
    d = getattr(_local, "zstd", None)
    if d is None:
        import zstandard

        d = _local.zstd = zstandard.ZstdDecompressor()
    # Streaming's zstd.compress writes one frame that states its size; max_output_size
    # bounds only a frame that does not: zstandard allocates the size a frame states
    # (an 8 KiB frame of zeros stating 256 MiB took 256 MiB to refuse), so it is refused
    # before.
    stated = _frame_size(data)
    if stated >= 0 and stated != size:
        raise ValueError(f"its frame states {stated} bytes")
    out: bytes = d.decompress(data, max_output_size=size + 1)
    return out


def _frame_size(data: Any) -> int:
    """The size the zstd frame ``data`` starts with states (-1: none stated)."""
    import zstandard

    try:
        n: int = zstandard.frame_content_size(data)
    except zstandard.ZstdError:
        return -1  # no frame header: decompress says what is wrong
    return n


def _bounded(d: Any, data: Any, size: int) -> bytes:
    """What ``d`` (a zlib or bz2 decompressor) makes of ``data``, at most ``size + 1``
    bytes; a stream cut short is an error, not a shorter shard."""
    out: bytes = d.decompress(data, size + 1)
    if len(out) <= size and not d.eof:
        raise EOFError("the stream ends before its end marker: truncated")
    return out


def _gz(data: Any, size: int) -> bytes:
    return _bounded(zlib.decompressobj(16 + zlib.MAX_WBITS), data, size)


def _bz2(data: Any, size: int) -> bytes:
    return _bounded(bz2.BZ2Decompressor(), data, size)


def _br(data: Any, size: int) -> bytes:
    import brotli

    # Bounded as _bounded: brotli.decompress made all of a 405-byte stream's 256 MiB.
    d = brotli.Decompressor()
    out: bytes = d.process(bytes(data), output_buffer_limit=size + 1)
    if len(out) <= size and not d.is_finished():
        raise EOFError("the stream ends before its end marker: truncated")
    return out


def _snappy(data: Any, size: int) -> bytes:
    import snappy

    # Its header (a varint) states the size, which snappy makes whole before any check:
    # 3 MiB stating 64 MiB were made whole to be refused. A header cut or too long is
    # left to decompress, which names it.
    head = bytes(data[:5])
    stated = shift = 0
    for byte in head:
        stated |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            if stated != size:
                raise ValueError(f"its header states {stated} bytes")
            break
    out: bytes = bytes(snappy.decompress(bytes(data)))
    return out


_DECOMPRESS: dict[str, Callable[[Any, int], bytes]] = {
    "zstd": _zstd,
    "gz": _gz,
    "bz2": _bz2,
    "br": _br,
    "snappy": _snappy,
}


def decompress(
    family: str, data: Any, size: int, name: str, says: str = "index.json's raw_data.bytes"
) -> bytes:
    """The ``size`` bytes that ``data`` (the stored shard ``name``) decompresses to
    (``says``: what gives ``size``, for the error)."""
    try:
        out = _DECOMPRESS[family](data, size)
    except Exception as exc:  # each codec has its own errors: named here, whatever they are
        # python-snappy's UncompressError says nothing itself: its cause (cramjam's) does.
        why = exc if str(exc) or exc.__cause__ is None else exc.__cause__
        raise FormatError(
            f"{name}: cannot be decompressed as {family} ({type(why).__name__}: {why}); "
            "damaged or cut"
        ) from exc
    if len(out) != size:
        got = f"{len(out)} bytes" if len(out) <= size else f"more than {size} bytes"
        raise FormatError(f"{name}: decompresses to {got}, {says} says {size}")
    return out


def _hasher(algo: str) -> Callable[[Any], Any] | None:
    """The function computing Streaming's hash ``algo``; ``None``: not computable here
    (an xxhash one without the xxhash package, or a name neither knows)."""
    # Each package's hashes by name, as Streaming's hashing.py takes them: their other
    # attributes (hashlib.new, file_digest, xxhash.xxh64_hexdigest) are no hash.
    if algo.startswith("xxh"):
        try:
            import xxhash
        except ImportError:
            return None
        if algo not in getattr(xxhash, "algorithms_available", ()):  # (since xxhash 2.0)
            return None
        return getattr(xxhash, algo)  # type: ignore[no-any-return, unused-ignore]
    # Nor shake's (Streaming never writes these: no fixed length).
    if algo not in hashlib.algorithms_guaranteed or algo.startswith("shake_"):
        return None
    fn: Callable[[Any], Any] = getattr(hashlib, algo)
    return fn


def check_hashes(data: Any, hashes: tuple[tuple[str, str], ...], name: str, what: str) -> None:
    """Check ``data`` against each of Streaming's ``hashes`` that can be computed here."""
    for algo, want in hashes:
        fn = _hasher(algo)
        if fn is None:
            continue
        got = fn(data).hexdigest()
        if got != want:
            raise FormatError(
                f"{name}: {what} {algo} digest {got}, index.json says {want}: damaged, or "
                "rewritten after the index was"
            )
