"""formats layer: what bytes mean (file samples, tables, ragged rows)."""

from headrace.formats._buffer import Buffer
from headrace.formats._files import (
    FILE_FORMATS,
    Decoded,
    FileFormat,
    decode,
    decode_raw,
    encode,
    file_format,
    synthetic_arrays,
    write_sample_file,
)
from headrace.formats._hdf5 import decode_hdf5, encode_hdf5
from headrace.formats._images import decode_jpeg, decode_png, encode_jpeg, encode_png
from headrace.formats._npy import decode_npy, decode_npz, encode_npy, encode_npz
from headrace.formats._ragged import Ragged
from headrace.formats._tables import Table, TableColumn

__all__ = [
    "Buffer",
    "Decoded",
    "FILE_FORMATS",
    "FileFormat",
    "Ragged",
    "Table",
    "TableColumn",
    "decode",
    "decode_hdf5",
    "decode_jpeg",
    "decode_npy",
    "decode_npz",
    "decode_png",
    "decode_raw",
    "encode",
    "encode_hdf5",
    "encode_jpeg",
    "encode_npy",
    "encode_npz",
    "encode_png",
    "file_format",
    "synthetic_arrays",
    "write_sample_file",
]
