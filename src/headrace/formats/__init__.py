"""What bytes mean: token streams, rows, pairs, files (NPY, NPZ, JPEG, PNG, HDF5), tables,
MDS shards."""

from headrace.formats._buffer import Buffer
from headrace.formats._file_config import FileSourceConfig, OnCorrupt, SourceMode
from headrace.formats._file_counts import CountStats
from headrace.formats._file_modes import IterableFiles
from headrace.formats._file_plan import FilePlan, Shuffle
from headrace.formats._file_samples import sample_digests
from headrace.formats._file_source import FileSource
from headrace.formats._file_window import FetchWindow, WindowStats
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
from headrace.formats._image_encode import encode_jpeg, encode_png, encode_webp
from headrace.formats._images import IMAGE_MODES, ImageMode, decode_jpeg, decode_png
from headrace.formats._mds import MDSSource, MDSStats
from headrace.formats._megatron import (
    MEGATRON_MAGIC,
    MegatronIndex,
    read_megatron_index,
    write_megatron_index,
)
from headrace.formats._npy import decode_npy, encode_npy
from headrace.formats._npz import decode_npz, encode_npz
from headrace.formats._packed import table_token_files
from headrace.formats._pairs import PairRows
from headrace.formats._positions import cu_seqlens
from headrace.formats._ragged import Nested, Ragged
from headrace.formats._row_file import RowFile, open_row_file, write_row_file
from headrace.formats._row_plan import sample_rows
from headrace.formats._rows import PaddedRows
from headrace.formats._table_schema import TableColumn
from headrace.formats._table_source import TableSource
from headrace.formats._tables import Table
from headrace.formats._token_source import TokenSource
from headrace.formats._token_window import TokenStats
from headrace.formats._tokens import TOKEN_DTYPES, TokenFile, open_token_file, write_token_sidecar
from headrace.formats._webp import decode_webp

__all__ = [
    "Buffer",
    "CountStats",
    "Decoded",
    "FILE_FORMATS",
    "FetchWindow",
    "FileFormat",
    "FilePlan",
    "FileSource",
    "FileSourceConfig",
    "IMAGE_MODES",
    "ImageMode",
    "IterableFiles",
    "MDSSource",
    "MDSStats",
    "MEGATRON_MAGIC",
    "MegatronIndex",
    "Nested",
    "OnCorrupt",
    "PaddedRows",
    "PairRows",
    "Ragged",
    "RowFile",
    "Shuffle",
    "SourceMode",
    "TOKEN_DTYPES",
    "Table",
    "TableColumn",
    "TableSource",
    "TokenFile",
    "TokenSource",
    "TokenStats",
    "WindowStats",
    "cu_seqlens",
    "decode",
    "decode_hdf5",
    "decode_jpeg",
    "decode_npy",
    "decode_npz",
    "decode_png",
    "decode_raw",
    "decode_webp",
    "encode",
    "encode_hdf5",
    "encode_jpeg",
    "encode_npy",
    "encode_npz",
    "encode_png",
    "encode_webp",
    "file_format",
    "open_row_file",
    "open_token_file",
    "read_megatron_index",
    "sample_digests",
    "sample_rows",
    "synthetic_arrays",
    "table_token_files",
    "write_megatron_index",
    "write_row_file",
    "write_sample_file",
    "write_token_sidecar",
]
