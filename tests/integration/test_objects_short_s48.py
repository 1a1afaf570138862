"""Object stores on S3 (moto on 127.0.0.1) and local: ``get_ranges`` with a range past
the object's end says which, as ``get_range`` does (obstore panicked; said as a body
cut short, and retried)."""

from __future__ import annotations

import pytest
from s3util import OBJECTS, SMALL, S3Fixture, StoreFactory

from headrace.errors import ReadEOFError
from headrace.io import ObjectStore

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("where", ["s3", "file"])
def test_get_ranges_starting_past_the_end_is_an_eof_naming_the_range(
    s3: S3Fixture, open_store: StoreFactory, where: str
) -> None:
    # A range starting past the end beside one within the object: obstore panicked slicing
    # the coalesced body, said as "response body was cut short (obstore panicked: range start
    # must not be greater than end: 4106 <= 4096)", retried 4 times as a transient error.
    # get_range() and a lone range past the end said ReadEOFError with the object's size.
    size = OBJECTS[SMALL[0]]
    store = open_store() if where == "s3" else ObjectStore(s3.local_dir)
    with store, pytest.raises(ReadEOFError) as caught:
        store.get_ranges(SMALL[0], [(0, 5), (size + 10, 20)])
    said = str(caught.value)
    assert said.startswith(f"{store.url}/{SMALL[0]}, bytes [{size + 10}, {size + 30}): "), said
    assert f"read past the end of the object (object has {size} bytes" in said, said
    assert "panic" not in said and "gave up" not in said, said
