"""Closing: the shared ``with`` protocol, on a real file and on a real reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace._closing import Closing
from headrace.io import RangeReader
from headrace.io._file import LocalFile


def test_with_block_returns_the_object_and_closes_it_on_error(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"0123456789")
    with pytest.raises(KeyError, match="boom"), LocalFile(path) as f:
        assert isinstance(f, LocalFile)
        assert bytes(f.mapped[2:5]) == b"234"
        raise KeyError("boom")  # the error passes through; the file is closed anyway
    assert f.closed


def test_slotted_subclass_keeps_no_instance_dict(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"x")
    with LocalFile(path) as f:
        # A base without __slots__ = () would give every LocalFile a __dict__.
        assert not hasattr(f, "__dict__")
        with pytest.raises(AttributeError):
            f.unknown = 1  # type: ignore[attr-defined]


def test_reader_closes_its_files_at_the_end_of_the_block(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(bytes(range(16)))
    with RangeReader("pread") as reader:
        assert reader.read(str(path), [(4, 3)])[0].tobytes() == bytes([4, 5, 6])
        opened = reader.file(str(path))
    assert reader.closed
    assert opened.closed


def test_close_is_required() -> None:
    class NoClose(Closing):
        pass

    with pytest.raises(TypeError, match=r"abstract method .?close"):
        NoClose()  # type: ignore[abstract]


def test_every_source_is_a_with_block_that_closes_its_files(tmp_path: Path) -> None:
    # TokenSource, TableSource, Mixture, the wrappers and IterableFiles (its with block:
    # test_file_labels.py) had close() but no with block (a TypeError), where FileSource
    # and the row sources had one (until 2026-12-05).
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from _fds import fds_in
    from headrace.formats import TableSource, TokenSource
    from headrace.pipeline import Filtered, Loader, Mapped, Mixture

    np.arange(4000, dtype=np.uint16).tofile(tmp_path / "a.bin")
    pq.write_table(pa.table({"n": np.arange(50)}), tmp_path / "t.parquet")

    def tokens() -> TokenSource:
        return TokenSource(tmp_path / "a.bin", dtype="uint16", context=16)

    def keep(arrays: dict[str, np.ndarray], samples: object) -> np.ndarray:
        return np.ones(len(arrays["x"]), dtype=bool)

    makers = {
        "TokenSource": tokens,
        "TableSource": lambda: TableSource(tmp_path / "t.parquet"),
        "Mixture": lambda: Mixture({"a": tokens(), "b": tokens()}, {"a": 1, "b": 1}, batch_size=4),
        "Mapped": lambda: Mapped(tokens(), lambda arrays, samples: arrays),
        "Filtered": lambda: Filtered(tokens(), keep),
    }

    def held() -> int:
        """Descriptors and mappings of the files here."""
        maps = Path("/proc/self/maps").read_text().splitlines()
        return fds_in(tmp_path) + sum(line.endswith(str(tmp_path / "a.bin")) for line in maps)

    for name, make in makers.items():
        with make() as src:
            ld = Loader(src, batch_size=4, seed=0, steps=2, prefetch=0)
            assert len(list(ld)) == 2, name
            assert held() > 0, name  # the source keeps its files open or mapped...
        assert held() == 0, name  # ... until the block ends
        ld.close()
