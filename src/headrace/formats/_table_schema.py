"""What a table's columns are: each Arrow type's kind and NumPy dtype, struct fields named
``column.field``, schema differences between shards in words, and a ``datasets`` indices
mapping told apart from rows."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from headrace.errors import ConfigError, FormatError
from headrace.formats._arrow_numpy import list_views, lists, numbers, temporal_dtype

__all__ = [
    "PARQUET_READ",
    "VIEWS",
    "TableColumn",
    "array_feature",
    "check_schema",
    "check_shapes",
    "classify_column",
    "columns_read",
    "extension_types",
    "field_of",
    "first_shape",
    "class_label_names",
    "image_features",
    "numeric_dtype",
    "parquet_leaves",
    "reference_part",
    "refuse_indices_mapping",
    "schema_difference",
    "struct_child",
    "table_columns",
]

#: How every Parquet reader here is opened (``pq.ParquetFile(..., **PARQUET_READ)``).
#: INT96 timestamps (Spark's, Impala's, Hive's; days and nanoseconds of the day) read as
#: microseconds, as Spark reads them: pyarrow's default nanoseconds hold only the years
#: 1677 to 2262, and those outside (a warehouse's 9999-12-31 "end of time", a birth
#: date in 1600) wrapped around without a word. A nanosecond timestamp's last three
#: digits are dropped (Spark writes none). Other timestamps keep their own unit.
PARQUET_READ = {"coerce_int96_timestamp_unit": "us"}

#: Arrow's view types of strings and bytes (polars writes them to IPC files), read as
#: the large type of the same values: ``arr.cast(VIEWS[str(arr.type)]())``, a copy.
VIEWS = {"string_view": "large_string", "binary_view": "large_binary"}


def check_shapes(shapes: object) -> dict[str, tuple[int | None, ...]]:
    """``shapes=`` as ``{column: shape}``, refused (:class:`ConfigError`) unless it maps
    column names to 1 to 5 dimensions of at least 1, the first of which may be ``None``
    (rows of items of the shape after it, as many as each row has; ``shapes=None``:
    none)."""
    if shapes is None:
        return {}
    if not isinstance(shapes, Mapping):
        raise ConfigError(
            f"shapes must map column names to shapes, e.g. shapes={{'input_features': "
            f"(80, 3000)}} (got {shapes!r})"
        )
    out = {}
    for name, shape in shapes.items():
        dims = tuple(shape) if isinstance(shape, (list, tuple)) else None
        ok = (
            isinstance(name, str)
            and dims is not None
            and 1 <= len(dims) <= 5
            and all(
                (isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1)
                or (d is None and (i == 0 or dims == (None, None)))
                for i, d in enumerate(dims)
            )
        )
        if not ok:
            raise ConfigError(
                f"shapes[{name!r}] must be a tuple of 1 to 5 dimensions of at least 1, e.g. "
                f"(80, 3000), the first of which may be None (rows of as many items as each "
                f"has, e.g. (None, 4) for boxes), or (None, None) for rows of lists of any "
                f"length (got {shape!r})"
            )
        assert dims is not None
        out[name] = tuple(None if d is None else int(d) for d in dims)
    return out


def check_schema(pa: Any, schema: Any, path: str) -> None:
    """Refuse a schema whose column or field names are not UTF-8, or with a fixed-size
    list of fewer than 0 items, naming the file.

    pyarrow decodes names only when Python asks for them, so a damaged footer or
    schema message opens and fails later, anywhere a name is read, with a
    ``UnicodeDecodeError``; every name is read here, once, when the file opens. It
    takes a fixed-size list's size as written, too: a damaged one of -536,870,910
    items failed with pyarrow's ``ValueError`` where the types were compared.
    """

    def walk(field: Any) -> None:
        field.name  # noqa: B018 (decodes it)
        t = field.type
        if pa.types.is_fixed_size_list(t) and t.list_size < 0:
            raise FormatError(
                f"{path}: corrupt schema: field {field.name!r} is a fixed-size list of "
                f"{t.list_size} items; the file is damaged: copy or write it again"
            )
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                walk(t.field(i))
        elif pa.types.is_map(t):
            walk(t.key_field)
            walk(t.item_field)
        elif hasattr(t, "value_field"):  # lists of every kind
            walk(t.value_field)

    try:
        for f in schema:
            walk(f)
    except UnicodeDecodeError as exc:
        raise FormatError(
            f"{path}: corrupt schema: a column or field name is not UTF-8 ({exc}); the file "
            "is damaged: copy or write it again"
        ) from exc


@contextlib.contextmanager
def extension_types(path: str) -> Iterator[None]:
    """Reading a schema inside: an error raised by an Arrow extension type registered in
    this process (``datasets`` registers ``Array2D`` to ``Array5D``) that refuses the
    metadata the file stores for it becomes a :class:`FormatError` naming the file, the
    type and that metadata; every other error passes unchanged.

    pyarrow hands such a type each field's stored metadata as it reads the schema, and
    what the type raises (``datasets``: a ``ValueError`` for a dtype it does not know, as
    one a newer version wrote) came out of ``TableSource`` as it was, naming no file.
    """
    try:
        yield
    except Exception as exc:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_name != "__arrow_ext_deserialize__":
            tb = tb.tb_next
        if tb is None:
            raise
        where = tb.tb_frame.f_locals
        cls = where.get("cls")
        name = f"{cls.__module__}.{cls.__qualname__}" if isinstance(cls, type) else "?"
        top = name.partition(".")[0]
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = f"{top} {version(top)}"
        except (PackageNotFoundError, ValueError):  # a type defined in a script, say
            installed = top
        stored = where.get("serialized")
        shown = repr(stored[:200]) if isinstance(stored, bytes) else "not shown"
        raise FormatError(
            f"{path}: a column's Arrow extension type {name}, registered in this process by "
            f"{installed}, refused the metadata the file stores for it "
            f"({shown}): {type(exc).__name__}: {exc}. The file was written by "
            f"another version of {top} than this one, or its schema is damaged: install "
            "the version that wrote it, or write the file again"
        ) from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class TableColumn:
    """One selected column: its name, Arrow type, kind and NumPy dtype of values."""

    name: str
    arrow_type: str
    kind: str  # "scalar" | "fixed" | "ragged" | "nested" (lists of lists) | "bytes"
    dtype: np.dtype[Any]
    width: int = 0  # for "fixed"
    #: each row's shape, for a "fixed" column of nested lists (a ``datasets`` ArrayND
    #: feature); ``()``: ``(width,)``
    shape: tuple[int, ...] = ()
    #: each item's shape, for a "ragged" column of rows of items of one shape (nested
    #: lists of shape ``(None, *item_shape)``); ``()``: numbers
    item_shape: tuple[int, ...] = ()
    #: the top-level column the values lie in (``name``, but for a struct's field)
    source: str = ""
    #: the struct fields from ``source`` down to the values (``()``: ``source`` itself)
    field: tuple[str, ...] = ()
    #: the values' Arrow type where the column stores them encoded (a dictionary's, or
    #: a canonical extension type's storage)
    decoded: str = ""

    @property
    def value_type(self) -> str:
        """The Arrow type of the values read: ``arrow_type``, or a dictionary's values'."""
        return self.decoded or self.arrow_type

    @property
    def read(self) -> str:
        """What is asked of the files: the top-level column (a struct is read whole)."""
        return self.source or self.name

    @property
    def fixed_bytes(self) -> bool:
        """A ``fixed_size_binary[k]`` column: ``(B, k)`` bytes of each row, no list items."""
        return self.value_type.startswith("fixed_size_binary")

    @property
    def listed(self) -> bool:
        """Whether the values are a list's items, each of which may be null apart."""
        return self.kind in ("ragged", "fixed", "nested") and not self.fixed_bytes


def _bytes_field(pa: Any, typ: Any) -> Any:
    """The type of struct ``typ``'s ``bytes`` field if it is binary (or a ``binary_view``,
    polars' IPC files'), else ``None``."""
    i = typ.get_field_index("bytes")
    if i < 0:
        return None
    sub = typ.field(i).type
    t = pa.types
    return sub if t.is_binary(sub) or t.is_large_binary(sub) or str(sub) == "binary_view" else None


#: ``datasets``' fixed-shape array features, stored as nested lists of numbers
_ARRAY_ND = re.compile(r"datasets\.features\.features\.Array([2-5])DExtensionType")


def array_feature(typ: Any, metadata: Mapping[bytes, bytes] | None) -> tuple[Any, str] | None:
    """``(shape, dtype)`` of a ``datasets`` ``Array2D`` ... ``Array5D`` column: its
    extension type (registered where ``datasets`` is imported) or, where it is not, the
    field metadata pyarrow keeps of it (``[[2, 3], "float32"]``). ``None``: not one."""
    name = getattr(typ, "extension_name", None)
    if isinstance(name, str) and _ARRAY_ND.fullmatch(name):
        return tuple(getattr(typ, "shape", ())), str(getattr(typ, "value_type", ""))
    told = (metadata or {}).get(b"ARROW:extension:name", b"")
    if not _ARRAY_ND.fullmatch(told.decode("utf-8", "replace")):
        return None
    try:
        shape, dtype = json.loads((metadata or {})[b"ARROW:extension:metadata"])
        return tuple(shape), str(dtype)
    except (KeyError, ValueError, TypeError):
        return None


def _array_column(
    pa: Any,
    name: str,
    typ: Any,
    path: str,
    feature: tuple[Any, str],
    given: tuple[int | None, ...] | None,
) -> TableColumn:
    """A ``datasets`` ArrayND column: ``(B, *shape)`` of its numbers, read from its
    nested lists (each row's lengths checked against the shape when read), or rows of
    items of ``shape[1:]`` where its first dimension is ``None``. ``given``: the
    ``shapes=`` entry, which may set a dimension the feature leaves ``None``."""
    shape, _ = feature
    if given is not None:
        same = len(given) == len(shape)
        if not same or any(d is not None and d != g for d, g in zip(shape, given, strict=True)):
            raise ConfigError(
                f"{path}: column {name!r} is a datasets Array{len(shape)}D feature of shape "
                f"{list(shape)}; shapes= gives it {list(given)}: only a dimension the "
                "feature leaves None may be set"
            )
        shape = given
    storage = getattr(typ, "storage_type", typ)
    t = pa.types
    levels, inner = _list_levels(pa, storage)
    if (
        len(levels) != len(shape)
        or any(t.is_fixed_size_list(level) for level in levels)
        or not (t.is_integer(inner) or t.is_floating(inner))
    ):
        raise FormatError(
            f"{path}: column {name!r} is a datasets Array{len(shape)}D feature of shape "
            f"{shape} stored as {storage}, not {len(shape)} levels of lists of numbers; "
            "headrace cannot read it. Leave it out with columns=[...]"
        )
    if not all(
        (isinstance(d, int) and d > 0) or (d is None and not k) for k, d in enumerate(shape)
    ):
        raise FormatError(
            f"{path}: column {name!r} is a datasets Array{len(shape)}D feature of shape "
            f"{list(shape)}: only its first dimension may be None (rows of as many items "
            "as each holds), the others fixed sizes; headrace cannot read it. Leave it out "
            "with columns=[...]"
        )
    # A first dimension None: rows of as many items of shape[1:] as each has.
    return _nested_column(name, typ, numeric_dtype(pa, inner), shape)


#: Arrow's canonical extension types read as their storage: a JSON column's text as
#: bytes (``pa.json_()``), a UUID's 16 bytes (``pa.uuid()``)
_STORED_AS_IS = frozenset({"arrow.json", "arrow.uuid"})


def _tensor_column(pa: Any, name: str, typ: Any, path: str) -> TableColumn:
    """Arrow's canonical fixed-shape tensor column (``pa.fixed_shape_tensor``, as
    ``pa.FixedShapeTensorArray.from_numpy_ndarray`` writes a NumPy array): each row's
    numbers in one fixed-size list, in row-major order, read as ``(B, *shape)``."""
    t = pa.types
    shape = tuple(int(d) for d in typ.shape)
    order = list(typ.permutation or range(len(shape)))
    item = typ.storage_type.value_type
    if not shape or order != list(range(len(shape))):
        raise FormatError(
            f"{path}: column {name!r} is a tensor ({typ}) whose numbers are stored in "
            f"another order than its shape's (permutation {order}); headrace reads "
            "tensors stored in row-major order: write it with "
            "pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(a)), or "
            "leave it out with columns=[...]"
        )
    if not (t.is_integer(item) or t.is_floating(item) or t.is_boolean(item)):
        raise FormatError(
            f"{path}: column {name!r} is a tensor of {item} ({typ}); headrace reads "
            "tensors of numbers or bools: leave it out with columns=[...]"
        )
    return TableColumn(
        name=name,
        arrow_type=str(typ),
        kind="fixed",
        dtype=numeric_dtype(pa, item),
        width=int(typ.storage_type.list_size),
        shape=shape,
    )


def numeric_dtype(pa: Any, typ: Any) -> np.dtype[Any]:
    """The NumPy dtype of an integer, floating or boolean Arrow type, found without
    pandas: pyarrow's ``to_pandas_dtype()`` imports it (pyarrow 19 without pandas
    failed every table with a number column, 2026-12-04)."""
    t = pa.types
    if t.is_boolean(typ):
        return np.dtype(np.bool_)
    kind = "f" if t.is_floating(typ) else "i" if t.is_signed_integer(typ) else "u"
    return np.dtype(f"{kind}{typ.bit_width // 8}")


def _list_levels(pa: Any, typ: Any) -> tuple[list[Any], Any]:
    """The levels of lists (of any kind) of ``typ``, outermost first, and their items' type."""
    t = pa.types
    levels = []
    while t.is_list(typ) or t.is_large_list(typ) or t.is_fixed_size_list(typ):
        levels.append(typ)
        typ = typ.value_type
    return levels, typ


def _shaped_column(
    pa: Any, name: str, typ: Any, path: str, shape: tuple[int | None, ...]
) -> TableColumn:
    """Column ``name`` of lists of numbers or bools read as ``(B, *shape)`` (``shapes=``):
    one level of lists a dimension, each row's lengths checked when read; a first
    dimension ``None``: rows of as many items of ``shape[1:]`` as each has, padded like
    lists of numbers (:func:`_nested_column`)."""
    t = pa.types
    levels, item = _list_levels(pa, typ)
    if not levels or not (t.is_integer(item) or t.is_floating(item) or t.is_boolean(item)):
        raise ConfigError(
            f"{path}: shapes= names column {name!r} of type {typ}; a shape is given to "
            "lists of numbers or bools, nested one level a dimension"
        )
    if len(levels) != len(shape):
        raise ConfigError(
            f"{path}: column {name!r} ({typ}) is {len(levels)} level(s) of lists; shapes= "
            f"gives it {list(shape)}, {len(shape)} dimension(s)"
        )
    for d, level in zip(shape, levels, strict=True):
        if t.is_fixed_size_list(level) and level.list_size != d:
            raise ConfigError(
                f"{path}: column {name!r} ({typ}) holds lists of {level.list_size} items "
                f"where shapes= gives {list(shape)}"
            )
    if len(levels) == 1 and (t.is_fixed_size_list(typ) or shape[0] is None):
        return classify_column(pa, name, typ, path)  # (B, k), or lists of numbers
    if shape == (None, None):  # rows of lists of any length, padded at both levels
        return TableColumn(
            name=name, arrow_type=str(typ), kind="nested", dtype=numeric_dtype(pa, item)
        )
    return _nested_column(name, typ, numeric_dtype(pa, item), shape)


def _nested_column(
    name: str, typ: Any, dtype: np.dtype[Any], shape: tuple[int | None, ...]
) -> TableColumn:
    """Column ``name`` of nested lists of ``shape`` (each row's lengths checked when
    read): ``(B, *shape)``, or with a first dimension ``None``, rows of items of
    ``shape[1:]`` (a "ragged" column, padded to a width as lists of numbers are)."""
    if shape[0] is None:
        item = tuple(int(d) for d in shape[1:] if d is not None)
        return TableColumn(
            name=name, arrow_type=str(typ), kind="ragged", dtype=dtype, item_shape=item
        )
    fixed = tuple(int(d) for d in shape if d is not None)
    return TableColumn(
        name=name,
        arrow_type=str(typ),
        kind="fixed",
        dtype=dtype,
        width=int(np.prod(fixed)),
        shape=fixed,
    )


def classify_column(
    pa: Any,
    name: str,
    typ: Any,
    path: str,
    metadata: Mapping[bytes, bytes] | None = None,
    shape: tuple[int | None, ...] | None = None,
    example: Callable[[], tuple[int, ...] | None] | None = None,
) -> TableColumn:
    """What column ``name`` (of Arrow type ``typ``, in file ``path``; ``metadata``: its
    field's) reads as. A struct with a binary ``bytes`` field (an Image or Audio
    feature) reads as those bytes; a ``datasets`` ArrayND feature, and lists of numbers
    given a ``shape`` (``shapes=``), as ``(B, *shape)``. ``example``: the shape of the
    table's first row of the column, asked for only to suggest a ``shapes=`` entry."""
    t = pa.types
    feature = array_feature(typ, metadata)
    if feature is not None:
        return _array_column(pa, name, typ, path, feature, shape)
    if getattr(typ, "extension_name", None) == "arrow.fixed_shape_tensor":
        return _tensor_column(pa, name, typ, path)
    if getattr(typ, "extension_name", None) in _STORED_AS_IS:
        inner = classify_column(pa, name, typ.storage_type, path)
        return replace(inner, arrow_type=str(typ), decoded=inner.value_type)
    plain = list_views(pa, typ)
    if plain is not typ:  # list views (Arrow 14+): read as the lists they are (a copy)
        try:
            inner = classify_column(pa, name, plain, path, metadata, shape, example)
        except (ConfigError, FormatError) as exc:
            exc.add_note(f"column {name!r} is stored as {typ}, read as {plain}")
            raise
        return replace(inner, arrow_type=str(typ))
    if shape is not None:
        return _shaped_column(pa, name, typ, path, shape)

    def numeric(x: Any) -> bool:
        return bool(t.is_integer(x) or t.is_floating(x))

    if t.is_struct(typ):
        # A struct with a binary ``bytes`` field: the Hugging Face Image and Audio
        # features' storage, whose ``path`` is null once the bytes are embedded.
        sub = _bytes_field(pa, typ)
        if sub is not None:
            inner = classify_column(pa, name, sub, path)
            return replace(inner, arrow_type=str(typ), source=name, field=("bytes",))
    if t.is_dictionary(typ):
        # A pandas category, or a column written dictionary-encoded: read as its values
        # (decoded per record batch or row group, when read).
        inner = classify_column(pa, name, typ.value_type, path)
        return replace(inner, arrow_type=str(typ), decoded=inner.value_type)
    if numeric(typ) or t.is_boolean(typ):
        return TableColumn(
            name=name, arrow_type=str(typ), kind="scalar", dtype=numeric_dtype(pa, typ)
        )
    when = temporal_dtype(typ)
    if when is not None:  # timestamps, dates, durations, times: datetime64 / timedelta64
        return TableColumn(name=name, arrow_type=str(typ), kind="scalar", dtype=when)
    if t.is_fixed_size_list(typ) and (numeric(typ.value_type) or t.is_boolean(typ.value_type)):
        return TableColumn(
            name=name,
            arrow_type=str(typ),
            kind="fixed",
            dtype=numeric_dtype(pa, typ.value_type),
            width=typ.list_size,
        )
    if t.is_fixed_size_list(typ) and temporal_dtype(typ.value_type) is not None:
        when = temporal_dtype(typ.value_type)
        assert when is not None
        return TableColumn(
            name=name, arrow_type=str(typ), kind="fixed", dtype=when, width=typ.list_size
        )
    if t.is_fixed_size_binary(typ):  # hashes, ids: each row's k bytes
        return TableColumn(
            name=name,
            arrow_type=str(typ),
            kind="fixed",
            dtype=np.dtype(np.uint8),
            width=typ.byte_width,
        )
    if (t.is_list(typ) or t.is_large_list(typ)) and (
        numeric(typ.value_type) or t.is_boolean(typ.value_type)
    ):  # a list of bools: a mask per token, padded with False (or pad_values 1: True)
        return TableColumn(
            name=name, arrow_type=str(typ), kind="ragged", dtype=numeric_dtype(pa, typ.value_type)
        )
    if (t.is_list(typ) or t.is_large_list(typ)) and temporal_dtype(typ.value_type) is not None:
        # Lists of timestamps (an event log's times): datetime64 / timedelta64 of the
        # unit as stored, as a timestamp column's, padded with the count pad_values gives.
        when = temporal_dtype(typ.value_type)
        assert when is not None
        return TableColumn(name=name, arrow_type=str(typ), kind="ragged", dtype=when)
    if (
        t.is_string(typ)
        or t.is_binary(typ)
        or t.is_large_string(typ)
        or t.is_large_binary(typ)
        or str(typ) in VIEWS  # polars' IPC files: read as their large type (a copy)
    ):
        return TableColumn(name=name, arrow_type=str(typ), kind="bytes", dtype=np.dtype(np.uint8))
    hint = ""
    if t.is_struct(typ):
        fields = ", ".join(repr(f"{name}.{f.name}") for f in typ)
        hint = f" Read its fields by name instead, e.g. columns=[{fields}]."
    elif t.is_decimal(typ):  # (NumPy has no decimal type; which conversion is the user's call)
        hint = (
            f" Or write it as numbers: pyarrow's table.cast of {name!r} to float64 "
            f"(approximate), or to int64 after multiplying by 10**{typ.scale} (exact, "
            "to 18 digits)."
        )
    levels, item = _list_levels(pa, typ)
    if (
        len(levels) > 1
        and (numeric(item) or t.is_boolean(item))
        and not t.is_fixed_size_list(levels[0])
        and all(t.is_fixed_size_list(v) for v in levels[1:])
    ):
        # Rows of items whose shape the schema gives (a detection dataset's boxes,
        # list<fixed_size_list<float>[4]>): as many a row as it holds, padded as lists.
        sizes = tuple(int(v.list_size) for v in levels[1:])
        return _nested_column(name, typ, numeric_dtype(pa, item), (None, *sizes))
    if len(levels) > 1 and (numeric(item) or t.is_boolean(item)):
        if all(t.is_fixed_size_list(v) for v in levels):  # the schema gives the shape
            return _shaped_column(pa, name, typ, path, tuple(int(v.list_size) for v in levels))
        # A feature extractor's output saved by ds.map (Whisper's input_features, an
        # image processor's pixel_values): lists of lists, one shape in every row.
        dims = [
            str(v.list_size) if t.is_fixed_size_list(v) else f"d{k}" for k, v in enumerate(levels)
        ]
        seen = example() if example is not None else None
        first = ""
        if seen is not None and len(seen) == len(dims) and all(seen):
            dims, first = [str(d) for d in seen], " (the first row's shape)"
        given = f"({', '.join(dims)})"
        items = (
            ""  # every row holds as many items as its fixed-size list: no None to give
            if t.is_fixed_size_list(levels[0])
            else "where rows hold different numbers of items of one shape (boxes, frames), "
            "as rows of items padded to a width with "
            f"shapes={{{name!r}: (None, {', '.join(dims[1:])})}}; "
        )
        if items and len(levels) == 2 and not t.is_fixed_size_list(levels[1]):
            # Lists of any length in rows of any number of them (tokenized negatives).
            items += (
                "where rows hold lists of any length (tokenized negatives), padded at both "
                f"levels with shapes={{{name!r}: (None, None)}} and widths={{{name!r}: "
                "(lists, items)}; "
            )
        raise FormatError(
            f"{path}: column {name!r} holds lists of lists ({typ}), whose shape the schema "
            f"does not give: where every row has one, read it as (B, {', '.join(dims)}) "
            f"with shapes={{{name!r}: {given}}}{first} (each row is checked when read); "
            f"{items}or cast it to a datasets ArrayND feature; else leave it out with "
            "columns=[...]"
        )
    raise FormatError(
        f"{path}: column {name!r} has type {typ}, which headrace cannot turn into arrays; "
        "supported: numbers, bool, timestamps, dates, durations and times of day, "
        "fixed_size_list<number, bool or time>, list<number, bool or time> (e.g. token "
        "ids), lists of fixed-size lists of "
        "numbers (boxes), lists of lists of numbers given shapes=, fixed-shape tensors, "
        "string/binary, fixed_size_binary. "
        f"Leave it out with columns=[...].{hint}"
    )


def table_columns(
    pa: Any,
    schema: Any,
    names: Sequence[str],
    path: str,
    where: str,
    shapes: Mapping[str, tuple[int | None, ...]],
    example: Callable[[str], tuple[int, ...] | None] | None = None,
) -> tuple[dict[str, TableColumn], Any]:
    """Each of ``names`` (checked by :func:`columns_read`) of the first file's ``schema``
    (its ``path``) classified, and the schema of the columns read (a field under its
    ``column.field`` name). ``shapes``: of columns read as ``(B, *shape)``; ``example``:
    a column's first row's shape, to suggest one (:func:`classify_column`)."""
    unread = sorted(set(shapes) - set(names))
    if unread:
        raise ConfigError(
            f"{where}: shapes= names column(s) {unread} that are not read; reading {list(names)}"
        )
    columns = {}
    fields = []
    for c in names:
        top, down, typ = field_of(pa, schema, c, where)
        _refuse_image_lists(pa, c, typ, path, [n for n in schema.names if n != top])
        meta = None if down else schema.field(c).metadata
        seen = None if example is None else partial(example, c)
        col = classify_column(pa, c, typ, path, meta, shapes.get(c), seen)
        columns[c] = replace(col, source=top, field=(*down, *col.field))
        fields.append(schema.field(c) if not down else pa.field(c, typ))
        if isinstance(typ, pa.ExtensionType) and (col.shape or col.item_shape):
            # As a process without datasets imported sees it (its storage, the extension
            # named in metadata): the fingerprint must not depend on what was imported.
            meta = {  # in the order pyarrow writes them
                b"ARROW:extension:metadata": typ.__arrow_ext_serialize__(),
                b"ARROW:extension:name": typ.extension_name.encode(),
            }
            fields[-1] = pa.field(c, typ.storage_type, metadata=meta)
    return columns, pa.schema(fields)


def first_shape(pa: Any, arr: Any) -> tuple[int, ...]:
    """The shape of the first row of ``arr`` (nested lists), following each level's first
    list: ``(80, 3000)`` for a row of 80 lists of 3,000 numbers."""
    dims = []
    level = lists(pa, arr.slice(0, 1))
    t = pa.types
    while t.is_list(level.type) or t.is_large_list(level.type) or t.is_fixed_size_list(level.type):
        level = level.flatten()
        dims.append(len(level))
        level = level.slice(0, 1)
    return tuple(dims)


def _refuse_image_lists(pa: Any, name: str, typ: Any, path: str, others: list[str]) -> None:
    """Refuse column ``name`` if it is a list of ``Image()``-like structs, naming the
    ``others`` columns a read can keep."""
    t = pa.types
    if not (t.is_list(typ) or t.is_large_list(typ) or t.is_fixed_size_list(typ)):
        return
    item = typ.value_type
    if not (t.is_struct(item) and _bytes_field(pa, item) is not None):
        return
    # Each row's images would be a ragged list of ragged arrays, which no batch layout
    # here (stacked, or one array per row beside its shape) holds.
    raise FormatError(
        f"{path}: column {name!r} holds a list of images per row (datasets' "
        f"Sequence(Image()) or List(Image()), type {typ}); headrace decodes one image per "
        "row: leave it out with columns=[...] (e.g. "
        f"columns={others!r}), or write one image per row (ds.map(..., batched=True) "
        "that flattens the lists) and save that"
    )


def field_of(pa: Any, schema: Any, name: str, where: str) -> tuple[str, tuple[str, ...], Any]:
    """Column ``name`` of ``schema``: a top-level column, or a struct's field named
    ``column.field`` (``column.field.sub`` deeper): ``(top-level column, fields down
    from it, Arrow type)``. A name that is neither is a ``ConfigError`` (``where``:
    what it names) listing the struct's fields when the column is there."""
    if name in schema.names:
        twice = schema.names.count(name)
        if twice > 1:  # pyarrow's schema.field(name) raised KeyError "does not exist"
            raise FormatError(
                f"{where}: column {name!r} is named {twice} times in the schema; columns are "
                "read by name: write the file with one column of each name, or leave it out "
                "with columns=[...]"
            )
        return name, (), schema.field(name).type
    tops = sorted((n for n in schema.names if name.startswith(n + ".")), key=len, reverse=True)
    if not tops:
        raise ConfigError(f"{where}: no column(s) {[name]}; available: {list(schema.names)}")
    # Columns 'a' and 'a.b' (a struct): 'a.b.c' is a field of the longest that has it.
    errors = []
    for top in tops:
        try:
            return _field_under(pa, schema, name, top, where)
        except ConfigError as exc:
            errors.append(exc)
    raise errors[0]


def _field_under(
    pa: Any, schema: Any, name: str, top: str, where: str
) -> tuple[str, tuple[str, ...], Any]:
    """:func:`field_of`'s ``name`` as a field of top-level column ``top``."""
    typ = schema.field(top).type
    path: list[str] = []
    listed = None  # the list of structs crossed on the way down (one at most)
    for part in name[len(top) + 1 :].split("."):
        at = ".".join([top, *path])
        if listed is None and _struct_list(pa, typ):
            # datasets' List({...}) (a detection set's objects): list<struct<...>>. A
            # field's values are each row's items: a list of that field's type.
            listed, typ = typ, typ.value_type
        if not pa.types.is_struct(typ):
            raise ConfigError(
                f"{where}: column {name!r}: {at!r} is {typ}, not a struct; it has no field {part!r}"
            )
        i = typ.get_field_index(part)
        if i < 0:
            present = [f"{at}.{f.name}" for f in typ]
            raise ConfigError(
                f"{where}: column {name!r}: struct {at!r} has no field {part!r}; its "
                f"fields: {present}"
            )
        path.append(part)
        typ = typ.field(i).type
    if listed is not None:
        wide = pa.types.is_large_list(listed)
        typ = pa.large_list(typ) if wide else pa.list_(typ)
    return top, tuple(path), typ


def _struct_list(pa: Any, typ: Any) -> bool:
    """A list (or large list) of structs."""
    t = pa.types
    return bool((t.is_list(typ) or t.is_large_list(typ)) and t.is_struct(typ.value_type))


def struct_child(pa: Any, arr: Any, field: tuple[str, ...]) -> Any:
    """The values of ``arr``'s struct field ``field`` (``()``: ``arr``), a row null where
    the struct (or a struct on the way down) is. Through a list of structs, each row's
    items' values: a list array of them, no copy (an item null where its struct is)."""
    listed = None
    for name in field:
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if listed is None and _struct_list(pa, arr.type):
            listed, arr = arr, arr.values  # (all of the list's items: offsets index them)
        # flatten() applies the struct's offset and its nulls; .field() does neither.
        arr = arr.flatten()[arr.type.get_field_index(name)]
    if listed is None:
        return arr
    kind = pa.LargeListArray if pa.types.is_large_list(listed.type) else pa.ListArray
    mask = listed.is_null() if listed.null_count else None
    offsets = listed.offsets
    if mask is not None and offsets.offset:
        # A slice's (a Parquet sub-window's rows): pyarrow takes a mask only beside
        # offsets that start at their buffer's, "Null bitmap with offsets slice not
        # supported" otherwise; a copy of them, a number a row.
        offsets = pa.array(numbers(offsets), offsets.type)
    return kind.from_arrays(offsets, arr, mask=mask)


def parquet_leaves(pa: Any, schema: Any, count: int) -> dict[tuple[str, ...], int] | None:
    """The index of the Parquet leaf column of each top-level column, and each struct
    field under one, that is one leaf (not a list's items), by its names from the top,
    in a Parquet file of Arrow ``schema`` with ``count`` leaf columns; ``None`` where
    the schema's leaves are not ``count``.

    Parquet stores the leaves in schema order. Their dotted paths do not tell a column
    named ``answers.text`` (a ``datasets`` flatten()) from struct ``answers``' field
    ``text``, whose row group statistics were taken for the column's."""
    t = pa.types
    out: dict[tuple[str, ...], int] = {}
    at = 0

    def walk(names: tuple[str, ...], typ: Any, direct: bool) -> None:
        nonlocal at
        if isinstance(typ, pa.BaseExtensionType):
            typ = typ.storage_type
        if t.is_struct(typ):
            for f in typ:
                walk((*names, f.name), f.type, direct)
        elif t.is_map(typ):
            walk(names, typ.key_type, False)
            walk(names, typ.item_type, False)
        elif not t.is_dictionary(typ) and hasattr(typ, "value_type"):  # lists of every kind
            walk(names, typ.value_type, False)
        else:
            if direct:
                out[names] = at
            at += 1

    for f in schema:
        walk((f.name,), f.type, True)
    return out if at == count else None


def _hf_features(schema: Any) -> dict[str, Any]:
    """The features ``datasets`` wrote into ``schema``'s ``huggingface`` metadata
    (Parquet and Arrow alike), by column; ``{}`` without (or unreadable)."""
    raw = (schema.metadata or {}).get(b"huggingface")
    try:
        features = json.loads(raw)["info"]["features"] if raw else {}
    except (ValueError, KeyError, TypeError):
        return {}
    return features if isinstance(features, dict) else {}


def image_features(schema: Any) -> dict[str, str | None]:
    """The top-level columns that ``datasets`` stored as an ``Image()`` feature (not
    ``Image(decode=False)``), and each one's ``mode`` (``Image(mode="L")``; ``None``:
    none)."""
    # Image(decode=False): its user asked datasets for the bytes, so headrace gives them.
    return {
        n: f.get("mode") if isinstance(f.get("mode"), str) else None
        for n, f in _hf_features(schema).items()
        if isinstance(f, dict)
        and f.get("_type") == "Image"
        and f.get("decode", True) is not False
        and n in schema.names
    }


def class_label_names(schema: Any) -> dict[str, tuple[str, ...]]:
    """The top-level columns that ``datasets`` stored as a ``ClassLabel`` feature, or a
    list of them (``Sequence(ClassLabel(...))``, ``List(...)``: a token's NER tag), and
    each one's class names in label order."""
    out = {}
    for n, f in _hf_features(schema).items():
        if not isinstance(f, dict) or n not in schema.names:
            continue
        if f.get("_type") in ("Sequence", "List", "LargeList") and isinstance(
            f.get("feature"), dict
        ):
            f = f["feature"]
        names = f.get("names")
        if (
            f.get("_type") == "ClassLabel"
            and isinstance(names, list)
            and all(isinstance(c, str) for c in names)
        ):
            out[n] = tuple(names)
    return out


def schema_difference(schema: Any, first: Any, stored: Any = None, stored_first: Any = None) -> str:
    """The first difference between two schemas as read (:func:`_loose`), in words,
    with the types as the files store them (``stored``, ``stored_first``: the schemas
    before :func:`_loose`, whose types drop the offsets' width: a ``large_list<int64>``
    was said as "list<item: int64>"). A column one file has and the other lacks is said
    as which: until 2026-12-07 "columns [] not in the first file, ['score'] missing"."""

    def shown(loose: Any, raw: Any, name: str) -> Any:
        s = raw if raw is not None and raw.get_field_index(name) >= 0 else loose
        return s.field(name).type

    def listed(names: list[str]) -> str:
        return f"column {names[0]!r}" if len(names) == 1 else f"columns {names}"

    if gone := [n for n in first.names if n not in schema.names]:
        if len(gone) > 1:
            return f"it lacks {listed(gone)}, which the first file has"
        return f"it lacks {listed(gone)} ({shown(first, stored_first, gone[0])} in the first file)"
    if extra := [n for n in schema.names if n not in first.names]:
        what = f" ({shown(schema, stored, extra[0])})" if len(extra) == 1 else ""
        return f"it has {listed(extra)}{what}, which the first file lacks"
    for a, b in zip(schema, first, strict=True):
        if not a.type.equals(b.type):
            here, there = shown(schema, stored, a.name), shown(first, stored_first, b.name)
            return f"column {a.name!r} is {here} here, {there} there"
    return "field metadata"


def _loose(pa: Any, schema: Any) -> Any:
    """``schema`` as far as reading it is concerned: every file is read by its own
    types into the same arrays, so whether a field may hold nulls (they are refused by
    row anyway), 32- or 64-bit offsets (``string`` / ``large_string``, ``list`` /
    ``large_list``: polars writes the large ones, pyarrow and pandas the others; a
    ``string_view`` or ``binary_view``, polars' IPC files' strings, too) and
    dictionary encoding (a pandas ``category``, whose index width follows its count of
    categories; decoded per span) do not matter, nor does the columns' order; value
    types do. Until 2026-12-03 such shards side by side were refused. A list view
    (``list_view``, Arrow 14+) is read as a list, so it is one here too."""

    def loose(typ: Any) -> Any:
        typ = list_views(pa, typ)  # (a list view holds lists: read as one)
        if pa.types.is_dictionary(typ):
            return loose(typ.value_type)
        if str(typ) in VIEWS:
            typ = getattr(pa, VIEWS[str(typ)])()
        if pa.types.is_large_string(typ):
            return pa.string()
        if pa.types.is_large_binary(typ):
            return pa.binary()
        if pa.types.is_large_list(typ) or pa.types.is_list(typ):
            return pa.list_(loose(typ.value_type))
        if pa.types.is_fixed_size_list(typ):
            return pa.list_(loose(typ.value_type), typ.list_size)
        if pa.types.is_struct(typ):  # (its fields are read by name too)
            return pa.struct(sorted((pa.field(f.name, loose(f.type)) for f in typ), key=_name))
        return typ

    # Columns are read by name, so their order does not matter either.
    return pa.schema(sorted((pa.field(f.name, loose(f.type)) for f in schema), key=_name))


def _name(field: Any) -> str:
    return str(field.name)


def refuse_indices_mapping(pa: Any, path: str, schema: Any) -> None:
    """Refuse a ``datasets`` indices mapping: row numbers into another file, not rows.

    ``shuffle``, ``select``, ``filter``, ``sort`` and ``train_test_split`` leave one
    in the cache (``cache-<hash>.arrow``): a single ``indices`` column of uint64
    with the ``huggingface`` schema metadata that ``datasets`` writes.
    """
    if (
        schema.names == ["indices"]
        and schema.field("indices").type == pa.uint64()
        and b"huggingface" in (schema.metadata or {})
    ):
        raise ConfigError(
            f"{path} is a datasets indices mapping (the row numbers a shuffle, select, "
            "filter or sort picked from another file), not rows of data; headrace reads "
            "files in stored order and does not apply it: write the dataset you use with "
            "ds.save_to_disk(folder), which stores its rows in the order you see, and open "
            "that folder"
        )


def _refuse_unknown(parts: Sequence[Any], unknown: list[str], where: str) -> None:
    """Refuse the columns ``unknown`` that the first of ``parts`` lacks, saying where else
    a name lives: in other files (the first decides a table's columns), or in partition
    folder names (``year=2024/``: Spark and pyarrow's hive layout), which are not read."""
    available = list(parts[0].schema.names)
    for name in unknown:
        having = [p.path for p in parts if name in p.schema.names]
        if having:
            raise FormatError(
                f"{having[0]}: has column {name!r}, which {parts[0].path} does not "
                f"({len(having)} of {len(parts)} files have it); every file of a table "
                "must have the columns read: leave it out, or write it into every file"
            )
        folders = {
            part.partition("=")[2]
            for p in parts
            for part in p.path.replace("\\", "/").split("/")[:-1]
            if part.partition("=")[0] == name
        }
        if folders:
            raise ConfigError(
                f"{where}: no column {name!r} in the files; it is a key of their partition "
                f"folder names ({name}={sorted(folders)[0]}/...), whose values headrace does "
                "not read as columns: write it into the files, or open each partition as a "
                f"source of its own; available: {available}"
            )
    raise ConfigError(f"{where}: no column(s) {unknown}; available: {available}")


def reference_part(pa: Any, parts: Sequence[Any]) -> Any:
    """The file whose schema is the table's: the first, unless it holds no rows and
    its schema differs from the first file that holds some (an empty partition pandas
    wrote types an object column ``null``; it holds nothing to read by that type)."""
    first = parts[0]
    full = next((p for p in parts if sum(p.rows)), None)
    if sum(first.rows) or full is None:
        return first
    return first if _loose(pa, first.schema).equals(_loose(pa, full.schema)) else full


def columns_read(
    pa: Any, parts: Sequence[Any], columns: Sequence[str] | None, where: str
) -> list[str]:
    """The names of ``columns`` (all when ``None``) of a table's files ``parts``, checked:
    no file is a ``datasets`` indices mapping, each column is there, and every file has
    the same schema for them; ``where``: what a message names for the table."""
    for p in parts:
        refuse_indices_mapping(pa, p.path, p.schema)
    first = reference_part(pa, parts)
    available = list(first.schema.names)
    names = available if columns is None else list(columns)
    twice = [] if columns is None else sorted({c for c in names if names.count(c) > 1})
    if twice:  # a file's own schema naming one twice is refused below, as the file's fault
        # Read once and named once in a batch: the column meant in its place (a typo
        # for "attention_mask") would be missing without a word.
        raise ConfigError(
            f"{where}: columns name {twice} more than once ({names}); name each column once"
        )
    unknown = [c for c in names if c not in available and "." not in c]
    if unknown:
        _refuse_unknown(parts, unknown, where)
    tops = [field_of(pa, first.schema, c, where)[0] for c in names]
    if not names:
        what = "has no columns" if columns is None else "columns=[] names no column to read"
        raise ConfigError(f"{where}: {what}; available: {available}")

    def read(schema: Any) -> Any:
        """The columns read, as ``schema`` has them: the others may differ (a column
        of nulls only is typed null in the shards that have nothing else in it), and
        so may a struct's fields that no ``column.field`` read names (its values are
        found by name: a later shard may add a field)."""
        if columns is None:
            return schema
        fields = []
        for c, top in zip(names, tops, strict=True):
            if top not in schema.names:
                continue  # (missing here: said so below, as a field missing is)
            if c == top:
                fields.append(schema.field(c))
                continue
            with contextlib.suppress(ConfigError):
                fields.append(pa.field(c, field_of(pa, schema, c, where)[2]))
        return pa.schema(fields)

    expected = _loose(pa, read(first.schema))
    for p in parts:
        if p is first or not sum(p.rows):  # a file of no rows has nothing read by its types
            continue
        if not (found := _loose(pa, read(p.schema))).equals(expected):
            hint = "" if columns is not None else " (columns=[...] leaves the others out)"
            difference = schema_difference(found, expected, read(p.schema), read(first.schema))
            if difference.startswith("it "):  # a column some files have (schema evolution)
                hint = (
                    "; a column only some files have is read from none: leave it out "
                    "(columns=[...] names those read), or write it into every file"
                )
            elif difference.startswith("column "):  # a value type: say how to make them one
                hint += (
                    "; headrace converts no file's values to another's type: write the "
                    "column with one type in every file (pyarrow's table.cast, datasets' "
                    "ds.cast_column)"
                )
            raise FormatError(
                f"{p.path}: schema differs from {first.path} ({difference}); every file "
                f"of a table must have the same schema for the columns read{hint}:"
                f"\n{read(p.schema)}\nvs\n{read(first.schema)}"
            )
    return names
