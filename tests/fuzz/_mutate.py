"""Mutations of a valid file's bytes: truncations, byte flips and forged integer fields.

Every generator is a pure function of its arguments (flips of a seeded ``Random``), so a
case list is the same on every run and a failure names a case that can be rebuilt.

:func:`some` and :func:`per_field` take a fixed sample of a long case list, so that each
mutation kind is tried a few times rather than at every offset or value (the suite is
CPU-bound). ``HEADRACE_FUZZ_ALL=1`` in the environment lifts every such cap: each
module then runs its whole case lists.
"""

from __future__ import annotations

import json
import os
import random
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: ``HEADRACE_FUZZ_ALL=1``: :func:`some` and :func:`per_field` keep every case.
FUZZ_ALL = os.environ.get("HEADRACE_FUZZ_ALL", "") not in ("", "0")


@dataclass(frozen=True, kw_only=True)
class Case:
    """One mutated file: ``label`` says how it was made; ``strict``: same bytes or an error.

    A truncation can never be read whole, so it is strict. A flip in bytes that no
    checksum covers (an array's payload, a dtype letter) may decode to other valid data;
    such cases are not strict: they must only fail cleanly or succeed.
    """

    label: str
    data: bytes
    strict: bool


def truncations(data: bytes, marks: Iterable[int] = ()) -> list[Case]:
    """Cut ``data`` at 0, 1, the middle, the last byte, and at and beside each mark."""
    n = len(data)
    cuts = {0, 1, n // 2, n - 1}
    for m in marks:
        cuts.update((m - 1, m, m + 1))
    return [Case(label=f"cut@{c}", data=data[:c], strict=True) for c in sorted(cuts) if 0 <= c < n]


def flips(
    data: bytes,
    *,
    seed: int,
    count: int,
    regions: Sequence[tuple[int, int]] | None = None,
    strict: bool = False,
) -> list[Case]:
    """``count`` single-byte flips (xor a nonzero byte) at seeded offsets in ``regions``."""
    rng = random.Random(seed)
    spans = [(max(0, a), min(len(data), b)) for a, b in (regions or [(0, len(data))])]
    spans = [(a, b) for a, b in spans if b > a]
    out = []
    for _ in range(count):
        a, b = rng.choice(spans)
        at = rng.randrange(a, b)
        mask = rng.randrange(1, 256)
        mutated = bytearray(data)
        mutated[at] ^= mask
        out.append(Case(label=f"flip@{at}^{mask:#04x}", data=bytes(mutated), strict=strict))
    return out


def forge(
    data: bytes, at: int, fmt: str, values: Iterable[int], *, name: str, strict: bool = False
) -> list[Case]:
    """Write each of ``values`` into the ``struct`` field ``fmt`` at offset ``at``."""
    out = []
    size = struct.calcsize(fmt)
    signed = fmt[-1].islower()
    bits = 8 * size
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    for v in values:
        v = min(max(v, lo), hi)
        mutated = data[:at] + struct.pack(fmt, v) + data[at + size :]
        out.append(Case(label=f"{name}={v}", data=mutated, strict=strict))
    return out


def field_values(current: int) -> list[int]:
    """The forgeries worth trying on an integer field that holds ``current``."""
    return sorted({0, 1, current - 1, current + 1, 2 * current, -1, 2**31 - 1, 2**62, 2**64 - 1})


def replace(data: bytes, old: bytes, new: bytes, *, strict: bool = False) -> Case:
    """``data`` with its first ``old`` replaced by ``new`` (a forged text field)."""
    assert old in data, old
    return Case(label=f"{old!r}->{new!r}", data=data.replace(old, new, 1), strict=strict)


@dataclass(frozen=True)
class Field:
    """An integer field of a file: its name, offset, ``struct`` format and value."""

    name: str
    at: int
    fmt: str
    value: int


def forge_fields(data: bytes, fields: Iterable[Field], *, strict: bool = False) -> list[Case]:
    """Every field forged to each of :func:`field_values`."""
    out = []
    for f in fields:
        out += forge(data, f.at, f.fmt, field_values(f.value), name=f.name, strict=strict)
    return out


def some(cases: list[Case], n: int, seed: int) -> list[Case]:
    """At most ``n`` of ``cases``, the same ones on every run, in their order (all of
    them under ``HEADRACE_FUZZ_ALL=1``)."""
    if FUZZ_ALL or len(cases) <= n:
        return cases
    keep = set(random.Random(seed).sample(range(len(cases)), n))
    return [c for i, c in enumerate(cases) if i in keep]


def per_field(cases: list[Case], n: int, seed: int) -> list[Case]:
    """At most ``n`` forgeries of each field of ``cases`` (labelled ``name=value``, as
    :func:`forge` makes them): every field is still forged, to fewer values."""
    groups: dict[str, list[Case]] = {}
    for c in cases:
        groups.setdefault(c.label.rsplit("=", 1)[0], []).append(c)
    return [c for k, g in enumerate(groups.values()) for c in some(g, n, seed + k)]


def _field(data: bytes, name: str, at: int, fmt: str) -> Field:
    return Field(name, at, fmt, struct.unpack_from(fmt, data, at)[0])


def zip_fields(data: bytes) -> list[Field]:
    """The length, offset and version fields of a zip's local headers, central directory
    and end record (APPNOTE 4.3.7, 4.3.12, 4.3.16)."""
    out = []
    at = data.find(b"PK\x03\x04")
    while at >= 0:
        for name, off, fmt in [
            ("version", 4, "<H"),
            ("method", 8, "<H"),
            ("csize", 18, "<I"),
            ("usize", 22, "<I"),
            ("namelen", 26, "<H"),
            ("extralen", 28, "<H"),
        ]:
            out.append(_field(data, f"local@{at}.{name}", at + off, fmt))
        at = data.find(b"PK\x03\x04", at + 4)
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        for name, off, fmt in [
            ("needs", 6, "<H"),
            ("method", 10, "<H"),
            ("csize", 20, "<I"),
            ("usize", 24, "<I"),
            ("namelen", 28, "<H"),
            ("extralen", 30, "<H"),
            ("offset", 42, "<I"),
        ]:
            out.append(_field(data, f"central@{at}.{name}", at + off, fmt))
        at = data.find(b"PK\x01\x02", at + 4)
    at = data.rfind(b"PK\x05\x06")
    for name, off, fmt in [
        ("entries", 10, "<H"),
        ("cdsize", 12, "<I"),
        ("cdoffset", 16, "<I"),
        ("commentlen", 20, "<H"),
    ]:
        out.append(_field(data, f"end.{name}", at + off, fmt))
    return out


def jpeg_segments(data: bytes) -> list[Field]:
    """Each marker segment's length field (big-endian, after its FFxx marker)."""
    out, at = [], 2
    while at + 4 <= len(data) and data[at] == 0xFF and data[at + 1] != 0xDA:
        (n,) = struct.unpack_from(">H", data, at + 2)
        out.append(Field(f"segment@{at}", at + 2, ">H", n))
        at += 2 + n
    return out


def png_chunks(data: bytes) -> list[Field]:
    """Each chunk's length field (big-endian), and IHDR's width and height."""
    out, at = [Field("width", 16, ">I", 0), Field("height", 20, ">I", 0)], 8
    while at + 8 <= len(data):
        (n,) = struct.unpack_from(">I", data, at)
        out.append(Field(f"chunk@{at}", at, ">I", n))
        at += 12 + n
    return out


#: The Megatron .idx header's version and counts (the layout tests/_megatron writes).
MEGATRON_HEADER = [
    Field("version", 9, "<Q", 1),
    Field("sequences", 18, "<Q", 4),
    Field("documents", 26, "<Q", 5),
]

#: Superblock version 0's addresses (base, free space, end of file, root object
#: header): 8-byte fields from byte 24.
HDF5_SUPERBLOCK = [Field(f"superblock@{at}", at, "<Q", 0) for at in range(24, 96, 8)]


def npy_header_end(data: bytes) -> int:
    """Where an NPY file's array starts (its header's end)."""
    major = data[6]
    if major == 1:
        return 10 + struct.unpack_from("<H", data, 8)[0]
    return 12 + struct.unpack_from("<I", data, 8)[0]


def npy_forgeries(data: bytes) -> list[Case]:
    """An NPY header's length forged, and its dict's fields rewritten one at a time."""
    major = data[6]
    length = Field("header_len", 8, "<H" if major == 1 else "<I", npy_header_end(data) - 10)
    cases = forge_fields(data, [length])
    cases += forge(data, 6, "B", [0, 2, 3, 4, 255], name="major")
    header = data[: npy_header_end(data)]
    shape_at = header.index(b"'shape': (") + len(b"'shape': (")
    shape = header[shape_at : header.index(b")", shape_at)]
    descr_at = header.index(b"'descr': '") + len(b"'descr': '")
    descr = header[descr_at : header.index(b"'", descr_at)]
    for new_shape in [b"-1, 9", b"99999999999999999999, 9", b"2**62, 9", b"", b"0", b"1.5, 9"]:
        new = new_shape.ljust(len(shape))[: max(len(shape), len(new_shape))]
        cases.append(_rewrite(data, shape_at, shape, new))
    for new_descr in [b"<u8", b"|O", b"<U4", b"V0", b">u2", b"xx", b"<u2\x00"]:
        cases.append(_rewrite(data, descr_at, descr, new_descr))
    for key, new in [(b"'fortran_order': False", b"'fortran_order': True ")]:
        cases.append(Case(label=f"{key!r}->{new!r}", data=data.replace(key, new), strict=False))
    return cases


def _rewrite(data: bytes, at: int, old: bytes, new: bytes) -> Case:
    """``old`` at ``at`` replaced by ``new``; the header's padding absorbs the difference
    where it can, so the array still starts where it did."""
    end = npy_header_end(data)
    head = data[:at] + new + data[at + len(old) : end - 1]
    spare = len(head) - len(head.rstrip(b" "))
    if len(head) + 1 > end:
        head = head[: max(len(head) - spare, end - 1)]
    head = head.ljust(end - 1) + b"\n"
    return Case(label=f"npy {old!r}->{new!r}", data=head + data[end:], strict=False)


#: JSON values that are not what a field holds: wrong types, negative, huge, odd text.
BAD_JSON_VALUES: list[object] = [
    None,
    True,
    -1,
    0,
    2**63,
    10**400,
    1.5,
    "9",
    "",
    "../../etc/passwd",
    [9],
    [],
    {"a": 1},
    {},
]


def _paths(value: object, at: tuple[object, ...] = ()) -> Iterable[tuple[object, ...]]:
    yield at
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*at, i))


def _set(value: Any, path: tuple[Any, ...], new: object, *, delete: bool = False) -> Any:
    out = json.loads(json.dumps(value))
    parent = out
    for p in path[:-1]:
        parent = parent[p]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return out


def json_cases(pristine: bytes, values: Sequence[object] = BAD_JSON_VALUES) -> list[Case]:
    """Every value of a JSON document replaced by each of ``values``, every key and
    item deleted, a key added; bytes that are not UTF-8, not JSON, nested too deep."""
    doc = json.loads(pristine)
    cases = [
        Case(label="not utf-8", data=pristine.replace(b'"', b"\xff", 1), strict=True),
        Case(label="empty", data=b"", strict=True),
        Case(label="null", data=b"null", strict=True),
        Case(label="list", data=b"[]", strict=True),
        Case(label="nested", data=b"[" * 100_000, strict=True),
        Case(label="NaN", data=b'{"a": NaN}', strict=True),
    ]
    if isinstance(doc, dict):
        extra = json.dumps({**doc, "zz_extra": 1}).encode()
        cases.append(Case(label="extra key", data=extra, strict=False))
    for path in _paths(doc):
        if not path:
            continue
        gone = json.dumps(_set(doc, path, None, delete=True)).encode()
        cases.append(Case(label=f"del {path}", data=gone, strict=False))
        for v in values:
            data = json.dumps(_set(doc, path, v)).encode()
            cases.append(Case(label=f"{path}={v!r}"[:80], data=data, strict=False))
    return cases


#: TOML values that are not what a workload field holds (TOML has no null).
BAD_TOML_VALUES: list[object] = [
    True,
    -1,
    0,
    2**63 - 1,
    1e308,
    float("nan"),
    float("inf"),
    -1.5,
    "9",
    "",
    [9],
    [],
    {"a": 1},
]


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v == float("inf") else repr(v))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def toml_text(doc: dict[str, Any]) -> bytes:
    """A workload TOML: top-level keys, then one ``[table]`` of scalars a table."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for k, v in doc.items():
        if isinstance(v, dict):
            lines += ["", f"[{k}]", *(f"{kk} = {_toml_value(vv)}" for kk, vv in v.items())]
    return "\n".join(lines).encode() + b"\n"


def structured_cases(
    doc: Any, dump: Any, values: Sequence[object], *, extra: dict[str, object]
) -> list[Case]:
    """Each value of a parsed config replaced by each of ``values``, each key deleted,
    keys in ``extra`` added (``dump``: the document back to bytes)."""
    cases = [
        Case(label=f"extra {k}", data=dump({**doc, k: v}), strict=False) for k, v in extra.items()
    ]
    for path in _paths(doc):
        if not path:
            continue
        cases.append(
            Case(label=f"del {path}", data=dump(_set(doc, path, None, delete=True)), strict=False)
        )
        for v in values:
            cases.append(
                Case(label=f"{path}={v!r}"[:80], data=dump(_set(doc, path, v)), strict=False)
            )
    return cases
