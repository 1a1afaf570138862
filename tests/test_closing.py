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
